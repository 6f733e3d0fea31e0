"""One certification row (`certify.run.certify_unit`) at an extreme radius: every column finite."""
import math

import numpy as np

from attncert.certify.run import COLUMNS, certify_unit
from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.problem import random_head_problem


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
    assert COLUMNS[-1] == "exact_status" and set(COLUMNS) <= set(row) and row["exact_status"] == "ok"
