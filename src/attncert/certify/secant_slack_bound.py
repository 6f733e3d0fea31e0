"""Value-weighted secant-slack bound on the gap of the second-order certificate.

Quantity. Let t* = max g (the exact worst case), and for every key j let [l_j, u_j] be its score interval
and W_j an upper bound on its value over the perturbation set (`first_order_certificate.
score_value_intervals`, sound and outward-rounded). The secant of exp over [l_j, u_j] lies above exp by
at most

    eps_j = max_{s in [l_j, u_j]} ( sec_j(s) - e^s ) = e^{l_j} phi(u_j - l_j),
    phi(L) = (1 + h) log(1 + h) - h,   h = (e^L - L - 1) / L            (phi(L) = L^2/8 + O(L^3)),

attained at s = log of the secant slope. The bound is the linear-fractional (fractional) knapsack

    B(t*) = max_{0 <= Delta_j <= eps_j}  sum_j Delta_j (W_j - t*)_+ / ( Z_lo + sum_j Delta_j ),
    Z_lo = sum_j e^{l_j}  (the smallest possible softmax denominator),

solved greedily: take the keys in decreasing order of value excess v_j = (W_j - t*)_+ and add the whole
capacity eps_j while v_j exceeds the current ratio (Dinkelbach's criterion for a ratio of linear
functions over a box; the greedy order is optimal because the objective's level sets are half-spaces).

What it bounds ("raise model"). Consider any relaxation in which each key's weight may be raised from
e^{s_j} up to the secant sec_j(s_j) while its value is read at the same perturbation. For such a point
with weights e_j + Delta_j (0 <= Delta_j <= eps_j), Z = sum e_j and N = sum e_j w_j (N <= t* Z by
optimality of t*):

    (N + sum Delta_j w_j) / (Z + sum Delta_j) - t*  <=  sum Delta_j (w_j - t*)_+ / (Z + sum Delta_j)  <=  B(t*),

since the middle ratio decreases in Z >= Z_lo and w_j <= W_j. B is quadratic in the score width
(phi(L) ~ L^2 / 8) and hence in r. The second-order certificate of `second_order_certificate` is not
literally of this form (its lifted value is read at the a-scaled moment M/a while its exponential cones
anchor the weight at both the tau- and the a-scaled score); docs/certificate.md explains the relation and
the tests check gap <= B on every fixed-query unit.

t_star. B is non-increasing in t_star. Pass the exact worst case (fixed query: the certified bracket's
`hi`, within 1e-10 of the value spread of the true optimum). When the exact value is unavailable
(varying query) pass the best feasible value found by search: it is a lower bound of t*, so B(t_star) >=
B(t*) stays a valid upper bound of the gap measured against t*. Passing an *upper* bound of t* instead
(e.g. a certificate) gives B(t_U) <= B(t*): then the result bounds the gap measured against t_U, not
against t*. `SecantSlackBound.t_star_kind` records which was used.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attncert.certify.first_order_certificate import score_value_intervals
from attncert.head.problem import HeadProblem
from attncert.head.rounding import gamma


@dataclass
class SecantSlackBound:
    bound: float  # B(t_star)
    t_star: float
    t_star_kind: str  # "exact", "lower_bound" (best feasible value) or "upper_bound"
    eps: np.ndarray  # per-key secant error times e^{-S}, S = max of l_j and of log eps_j over keys with
    # v_j > 0 (<= 1 there; a key with v_j = 0 can show inf)
    excess: np.ndarray  # per-key value excess (W_j - t_star)_+
    keys_used: int  # keys filled (fully or partly) by the knapsack


def _phi_direct(L: np.ndarray) -> np.ndarray:
    """phi(L) for 0 < L <= 700 (no overflow there), without cancellation."""
    # h = (e^L - 1 - L) / L; for small L use its series L/2 + L^2/6 + L^3/24 + L^4/120
    h = np.where(L < 1e-3, L / 2 + L ** 2 / 6 + L ** 3 / 24 + L ** 4 / 120, (np.expm1(L) - L) / L)
    small = h < 1e-4
    hs = np.where(small, h, 0.0)
    return np.where(small, hs ** 2 / 2 - hs ** 3 / 6 + hs ** 4 / 12, (1.0 + h) * np.log1p(h) - h)


def log_secant_error_factor(L: np.ndarray) -> np.ndarray:
    """log phi(L), finite for every width L > 0 (-inf for L <= 0, where phi = 0).

    For L > 20, h = (e^L - 1 - L)/L is formed as log h = L - log L + log1p(-(L + 1) e^{-L}) and
    phi = h ((1 + 1/h)(log h + log1p(1/h)) - 1), so log phi = log h + log((1 + 1/h)(log h + log1p(1/h)) - 1):
    no overflow at any width (phi ~ e^L overflows a double above L ~ 709.8).
    """
    L = np.asarray(L, dtype=np.float64)
    out = np.full(L.shape, -np.inf)
    mid = (L > 0) & (L <= 20.0)
    with np.errstate(divide="ignore"):  # phi underflows to 0 only for L < 1e-154: log 0 = -inf is exact enough
        out[mid] = np.log(_phi_direct(L[mid]))
    big = L > 20.0
    Lb = L[big]
    logh = Lb - np.log(Lb) + np.log1p(-(Lb + 1.0) * np.exp(-Lb))
    ih = np.exp(-logh)
    out[big] = logh + np.log((1.0 + ih) * (logh + np.log1p(ih)) - 1.0)
    return out


def secant_error_factor(L: np.ndarray) -> np.ndarray:
    """phi(L) = max_{x in [0, L]} (1 + (e^L - 1) x / L - e^x), computed without cancellation.

    +inf where phi exceeds the double range (L above ~709.8), never NaN; use `log_secant_error_factor`
    for wide intervals.
    """
    L = np.asarray(L, dtype=np.float64)
    out = np.zeros_like(L)
    mid = (L > 0) & (L <= 700.0)
    out[mid] = _phi_direct(L[mid])
    big = L > 700.0
    with np.errstate(over="ignore"):
        out[big] = np.exp(log_secant_error_factor(L[big]))
    return out


def fractional_knapsack_ratio(eps: np.ndarray, v: np.ndarray, Z: float) -> tuple[float, int]:
    """max_{0 <= D <= eps} sum D v / (Z + sum D) for v >= 0, Z >= 0 (greedy by decreasing v).

    Z = 0 (e.g. a denominator that underflowed after rescaling) is allowed: the ratio of an empty
    selection is then 0, and the result only grows as Z shrinks (so an underestimated Z is safe).
    """
    order = np.argsort(-v, kind="stable")
    num, den, used = 0.0, float(Z), 0

    def ratio():
        return num / den if den > 0 else 0.0

    for j in order:
        if not v[j] > ratio():  # sorted: no later key can raise the ratio either
            break
        if eps[j] > 0:
            num += float(eps[j] * v[j])
            den += float(eps[j])
            used += 1
    return ratio(), used


def secant_slack_bound(problem: HeadProblem, t_star: float, t_star_kind: str = "exact") -> SecantSlackBound:
    """B(t_star) for the unit (max direction; use problem.negated() and -min for the min direction)."""
    if t_star_kind not in ("exact", "lower_bound", "upper_bound"):
        raise ValueError(f"t_star_kind must be 'exact', 'lower_bound' or 'upper_bound'; got {t_star_kind!r}")
    l, u, _, W = score_value_intervals(problem)
    # log space: eps_j = e^{l_j} phi(u_j - l_j) can exceed the double range (phi ~ e^L) and e^{l_j} can
    # underflow; the ratio is invariant under a common factor e^{-S}. S is taken over the denominator's
    # terms and the keys that can enter the knapsack (v_j > 0): keys with v_j <= 0 are never used, and a
    # huge unused eps must not push the used ones below the double range.
    v = np.maximum(W - t_star, 0.0)
    log_eps = l + log_secant_error_factor(u - l)
    usable = (v > 0) & np.isfinite(log_eps)
    S = float(max(l.max(), log_eps[usable].max() if usable.any() else -np.inf))
    with np.errstate(over="ignore"):  # only keys with v_j = 0 can exceed e^709 here (reported as inf)
        eps = np.exp(log_eps - S)
    Z = float(np.exp(l - S).sum())  # may underflow to 0: B only grows as Z shrinks (sound)
    B, used = fractional_knapsack_ratio(eps, v, Z)
    # outward: relative error of the scaled exponentials (argument up to X) and of the sums
    X = float(np.max(np.abs(np.concatenate([l - S, log_eps[usable] - S]))))
    B = B * (1.0 + gamma(2 * problem.n + 8) * (2.0 + X)) if B > 0 else B
    # keys whose scaled capacity underflowed to 0 add at most eps_j v_j / Z_lo each (log form)
    lost = usable & (eps == 0)
    if lost.any():
        logZ = float(np.logaddexp.reduce(l))
        B = math.nextafter(B + float(np.exp(np.minimum(log_eps[lost] + np.log(v[lost]) - logZ, 709.0)).sum()),
                           math.inf)
    B = min(B, float(v.max()))  # the ratio is a weighted mean of excesses: B <= max_j v_j
    if not math.isfinite(B):
        B = math.inf
    return SecantSlackBound(float(B), float(t_star), t_star_kind, eps, v, used)
