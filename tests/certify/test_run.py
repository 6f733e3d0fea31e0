"""One certification row: every column filled, the bounds ordered, and a soundness violation never silent."""
import math

import numpy as np

from attncert.certify.run import COLUMNS, certify_unit
from attncert.head.problem import random_head_problem
from attncert.pipeline.unit_tables import soundness_check


def test_certify_unit_fixed_and_varying_rows():
    for mode in ("fixed", "varying"):
        p = random_head_problem(np.random.default_rng(4), d=5, d_head=3, n=4, radius=0.02, mode=mode)
        row = certify_unit(p, ascent_restarts=2, ascent_steps=30)
        assert set(COLUMNS) <= set(row) and row["status"] == "ok", row["error"]
        assert row["first_order"] >= row["second_order"] >= row["best_feasible"] >= row["nominal"] - 1e-12
        if mode == "fixed":
            assert row["exact_hi"] >= row["exact_lo"] >= row["best_feasible"] - 1e-12
            assert row["second_order"] >= row["exact_hi"] and math.isfinite(row["secant_bound"])
        else:
            assert math.isnan(row["exact_hi"]) and math.isnan(row["secant_bound"])


def test_soundness_check_flags_a_bound_below_an_attained_value():
    row = {"best_feasible": 1.0, "exact_lo": 1.2, "exact_hi": 1.3, "first_order": 1.5, "second_order": 1.1}
    msgs = soundness_check(row)
    assert len(msgs) == 1 and msgs[0].startswith("second_order")
    row["second_order"] = 1.2 - 1e-12  # float noise is not a violation
    assert soundness_check(row) == []
