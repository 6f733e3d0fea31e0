"""When the relaxation cannot run or cannot beat first order: is the first-order bound already attained?

Problem. The second-order certificate falls back to the first-order bound F (a sound upper bound of max g) when
the weight band e^{2h} is beyond double precision (score half-width h > MAX_HALF_WIDTH) or the certified dual
ends above F. At such widths the worst case often puts essentially all weight on one token, and F is then the
true maximum: no relaxation can certify less than max g. A feasible perturbation Delta (||Delta_j|| <= r) with

    F - g(Z0 + Delta) <= ATTAINED_TOL * (F - g(Z0))

proves that F is within ATTAINED_TOL of the movement of max g. The value stays F (sound, computed without any
exact solver); only its label changes: solver "first_order_attained", fallback False, and the feasible value's
distance in `status`. The feasible value comes from a short projected-gradient ascent
(`best_feasible_ascent`, seeded, evaluated with `problem.value` after a feasibility check); it is a lower
bound of max g whatever the ascent's quality, so a poor search only leaves the fallback label in place.

Measured (bench/bench_second_order_fallback.py, varying query, r <= 0.1): on most units whose half-width
exceeds 18 the first-order bound equals an ascent value to 1e-10 of the movement (docs/certificate.md §12).
"""
from __future__ import annotations

import math
import time

from attncert.certify.second_order.relaxation.rows import SecondOrderResult
from attncert.head.problem import HeadProblem

ATTAINED_TOL = 1e-7  # F counts as attained when a feasible value is within this fraction of the movement F - g0
ASCENT_RESTARTS = 8
ASCENT_STEPS = 150


def first_order_attained(problem: HeadProblem, res: SecondOrderResult) -> SecondOrderResult:
    """`res` relabelled as attained (not a fallback) when a feasible value is within ATTAINED_TOL of it; else `res`.

    Only a fallback with a finite value (sense "max") is examined; the returned value is always `res.value`.
    """
    if not (res.fallback and math.isfinite(res.value)):
        return res
    from attncert.certify.best_feasible_ascent import best_feasible_ascent

    start = time.perf_counter()
    try:
        feasible = best_feasible_ascent(problem, restarts=ASCENT_RESTARTS, steps=ASCENT_STEPS, seed=0,
                                        num_threads=1).value
    except (ValueError, FloatingPointError, OverflowError, RuntimeError):
        return res
    res.seconds += time.perf_counter() - start
    movement = res.value - problem.nominal_value()
    if not (math.isfinite(feasible) and movement > 0.0):
        return res
    left = (res.value - feasible) / movement
    if left < -1e-9:  # never expected: recorded loudly, the label stays a fallback
        res.status = f"{res.status}; SOUNDNESS VIOLATION: a feasible value is {-left:.2g} of the movement above it"
        return res
    if left > ATTAINED_TOL:
        res.status = f"{res.status}; a feasible value is {left:.2g} of the movement below it"
        return res
    res.fallback = False
    res.solver = "first_order_attained"
    res.status = (f"first-order bound attained: a feasible value is within {left:.1e} of the movement "
                  f"(instead of {res.status})")
    return res
