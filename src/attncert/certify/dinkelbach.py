"""The safeguarded Dinkelbach iteration for the separable root (one source for every exact solver).

Problem. Maximize a ratio g(x) = sum_j e_j(x) w_j(x) / sum_j e_j(x) (e_j > 0) over a product set
x = (x_1, ..., x_n). Its optimum t* is the unique root of the decreasing function

    F(t) = max_x sum_j e_j(x_j) (w_j(x_j) - t),

because g(x) >= t  <=>  sum_j e_j (w_j - t) >= 0, and F splits into one small problem per token.

Iteration. Dinkelbach's method is Newton's method on F: from a feasible value t_lo, the maximizer x(t_lo)
of F(t_lo) has g(x(t_lo)) >= t_lo, with equality only at the root. A probe t with F(t) < 0 proves
t* < t and lowers the bracket's upper end t_hi. Newton converges superlinearly near the root but can
crawl far from it (F is a sum of exponentials: the gains stay about constant); when a Newton step gains
more than half the previous gain and less than a quarter of the bracket, the next probe is the middle
of [t_lo, t_hi] (bisection safeguard); so is it when a Newton step proves F(t_lo) > 0 but the better
point's value rounds to t_lo (its gain is below one ulp of t_lo). The loop stops when the bracket is narrower than
`tol`, or when a
Newton step from t_lo gains at most `tol` (F(t_lo) <= 0 up to rounding: t_lo is the optimum).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass
class DinkelbachStep:
    """What one evaluation of F at a probe t returns."""

    value: float  # g at the maximizer of F(t): a feasible value
    F_negative: bool  # F(t) < 0 was proven (t is above the optimum)
    point: Any  # the maximizer, returned with the best value
    improvable: bool = False  # F(t) > 0 proven: a better point exists even if its value rounds to t


def safeguarded_dinkelbach(step: Callable[[float], DinkelbachStep], t_lo: float, t_hi: float, start: Any,
                           tol: float = 0.0, max_iter: int = 10_000) -> tuple[float, Any, float, int]:
    """Returns (t_lo, its point, t_hi, iterations); t_lo is feasible (attained by the point)."""
    best, probe, prev_gain, it = start, t_lo, np.inf, 0
    for it in range(1, max_iter + 1):
        s = step(probe)
        if s.F_negative:
            t_hi = min(t_hi, probe)
        newton = probe == t_lo
        gain = s.value - t_lo
        if s.value > t_lo:
            t_lo, best = s.value, s.point
        # a Newton step that gains nothing ends the loop, unless F(t_lo) > 0 was proven (the better point's
        # value rounds to t_lo): then bisect, until the bracket cannot be split
        stuck = newton and not gain > tol and s.improvable
        if t_hi - t_lo <= tol or (newton and not gain > tol and not stuck):
            break
        if stuck and not t_lo < 0.5 * (t_lo + t_hi) < t_hi:
            break
        crawl = stuck or (newton and gain > 0.5 * prev_gain and gain < 0.25 * (t_hi - t_lo))
        prev_gain = gain if newton and not crawl else np.inf
        probe = 0.5 * (t_lo + t_hi) if crawl else t_lo
    return t_lo, best, t_hi, it
