"""Cross-checks within one row of the certification table: the guard against a bug shared by certifier and checker.

The per-number checks (`row_audit`) confirm each certificate against a program the audit rebuilds with the
certifier's own builders, so a bug in a builder (a wrong dropped-token rule, a wrong constraint) would be
confirmed too. These checks need no builder, only the points the audit has itself confirmed:

    covers_attained   every certified upper bound (first_order, second_order, second_order_tight, exact_hi) is at
                      or above the largest value g attains at an audited witness (the exact solver's witness, the
                      best feasible point), evaluated in ball arithmetic at points checked to lie in the ball
    bracket_order     exact_lo <= exact_hi
    table_status      the table does not mark the row UNSOUND (its own soundness check, which also compares with
                      the ascent cross-check's value)

A number that passed its own checks fails with the first cross-check it breaks.
"""
from __future__ import annotations

import math

UPPER_BOUNDS = ("first_order", "second_order", "second_order_tight", "exact_hi")


def _fail(outcome, check: str, margin: float, reason: str) -> None:
    outcome.status, outcome.check, outcome.margin, outcome.reason = "fail", check, margin, reason


def cross_check_row(out: dict, values: dict, attained: float, status: str, error: str) -> None:
    """Apply the cross-checks to the outcomes `out` (number -> Outcome) in place; `attained` is the largest lower
    end of g at an audited witness (-inf when none), `status`/`error` the row's own columns."""
    for k in UPPER_BOUNDS:
        o = out[k]
        if o.status == "pass" and math.isfinite(attained):
            margin = values[k] - attained
            o.margins += f";covers_attained={margin:.3g}"
            if not margin >= 0:
                _fail(o, "covers_attained", margin, f"below the value {attained!r} that an audited point attains")
    lo, hi = out["exact_lo"], out["exact_hi"]
    if lo.status == "pass" and hi.status == "pass" and not values["exact_lo"] <= values["exact_hi"]:
        for o in (lo, hi):
            _fail(o, "bracket_order", values["exact_hi"] - values["exact_lo"], "exact_lo above exact_hi")
    if status.strip() == "UNSOUND":
        for o in out.values():
            if o.status == "pass":
                _fail(o, "table_status", -math.inf, f"the table marks the row UNSOUND: {error[:200]}")
