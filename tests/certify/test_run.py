"""One certification row: every column filled, the bounds ordered, and a soundness violation never silent."""
import math

import numpy as np

from attncert.certify.run import COLUMNS, certify_unit
from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.problem import random_head_problem
from attncert.pipeline.unit_tables import soundness_check


def test_certify_unit_fixed_and_varying_rows():
    for mode in ("fixed", "varying"):
        p = random_head_problem(np.random.default_rng(4), d=5, d_head=3, n=4, radius=0.02, mode=mode)
        row = certify_unit(p, ascent_restarts=2, ascent_steps=30)
        assert set(COLUMNS) <= set(row) and row["status"] == "ok", row["error"]
        assert row["first_order"] >= row["second_order"] >= row["best_feasible"] >= row["nominal"] - 1e-12
        # tighter up to solver tolerance, still sound
        assert row["second_order_tight"] <= row["second_order"] + 1e-9 * (1 + abs(row["second_order"]))
        assert row["second_order_tight"] >= row["best_feasible"]
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


def test_row_finite_when_scores_move_by_hundreds():
    """Weight scale 6, r = 2 (fixed query, linf): scores move by ~900, every lower exponential underflows.
    The row's exact bracket, first-order certificate and ascent are finite and sound, and
    the exact bracket's status is reported in the appended `exact_status` column."""
    p = random_head_problem(np.random.default_rng(3), d=4, d_head=2, n=4, radius=2.0, norm="linf", scale=6.0)
    data = fixed_query_reduction(p)
    assert p.radius * np.abs(data.u_s).sum() > 370
    row = certify_unit(p, ascent_restarts=4, ascent_steps=40, second_order=False)  # (secant: with second order)
    for k in ("exact_lo", "exact_hi", "value_spread", "first_order", "best_feasible"):
        assert math.isfinite(row[k]), (k, row[k])
    assert row["best_feasible"] <= row["exact_hi"] <= row["first_order"]
    assert row["exact_hi"] - row["exact_lo"] <= 1e-10 * row["value_spread"]
    assert row["status"] == "ok", row["error"]
    assert "exact_status" in COLUMNS and set(COLUMNS) <= set(row) and row["exact_status"] == "ok"
