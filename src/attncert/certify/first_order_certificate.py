"""First-order certificate: a greedy linear program over admissible attention patterns.

Problem (sound upper bound on max g, fixed or varying query). Relax the head to independent
score intervals and value upper bounds,

    s_j in [l_j, u_j],     w_j <= W_j     for every feasible perturbation,

and bound

    g = sum_j a_j w_j <= sum_j a_j W_j <= U = max_{s in [l, u]}  sum_j e^{s_j} W_j / sum_j e^{s_j}.

U is a linear-fractional program over a box. At its optimum value U every score with W_j > U sits at
u_j and every score with W_j < U at l_j (d/ds_j of the ratio has the sign of W_j - U), so the optimal
pattern is "the k largest W take u, the rest take l" for some k: sort by W, evaluate all n + 1
thresholds with prefix sums, keep the best -- O(n log n).

The relaxation decouples *where* the head attends (the scores) from *what* it reads (the values):
the worst value and the worst attention are taken at different perturbations, so U - max g is first
order in r.

Intervals (row vectors; q0 = z_i W_Q + b_Q, k0_j = z_j W_K + b_K, ||.||_* the dual norm):
* values: W_j = w0_j + r ||W_V c||_*  (w_j = w0_j + (W_V c) . delta_j).
* fixed query: s_j = s0_j + u_s . delta_j, u_s = W_K q0 / sqrt(d_h), so s_j in s0_j +- r ||u_s||_*.
* varying query: with Delta q = delta_i W_Q, Delta k_j = delta_j W_K,
      sqrt(d_h) (s_j - s0_j) = delta_i . (W_Q k0_j) + delta_j . (W_K q0) + delta_i M delta_j^T,
  M = W_Q W_K^T, so |s_j - s0_j| <= (r ||W_Q k0_j||_* + r ||W_K q0||_* + r^2 beta) / sqrt(d_h) with
  beta >= max_{||x||, ||y|| <= 1} x M y^T (x, y independent, which also covers j = i):
    l2:   beta = ||M||_2 = sqrt(lambda_max(G_Q G_K)), G = W^T W (d_h x d_h), plus a rounding margin;
    linf: beta = min( sum_h ||W_Q[:, h]||_1 ||W_K[:, h]||_1 , d ||M||_2 , ||s^-1||_2 ||t^-1||_2 ||(S W_Q)(T W_K)^T||_2 )
          (x^T M y = sum_h (x.W_Q[:,h])(y.W_K[:,h]); ||x||_2 <= sqrt(d) ||x||_inf; the last for the diagonal
          scalings s, t > 0 of `diagonal_bilinear_bound`, which a certificate stores beside beta).

Outward rounding. Every endpoint is widened by a bound on its floating-point error (gamma_K times
the same expression in absolute values: `head.reduced_geometry`, and for the varying query's scores
`_varying_score_envelope`), and the
returned value adds 2 gamma_{n+6} (1 + X) max_j |W_j|, X = the largest |exponent| used, which bounds
the error of evaluating the best threshold's ratio (each threshold is evaluated with its own
log-sum-exp shift, so its largest weight is 1: no 0/0 once every e^{l_j} underflows, at any score
width), plus 1e-300 (1 + n max|W|) for weights that underflowed. The result is capped by the trivial
bound max_j W_j (U is a convex combination of the W_j), so it is finite at any radius.

Cost: O(n d d_h) (fixed query: O(d d_h)); the varying query adds the bilinear bound, O(d d_h^2) (linf: a few
dozen such steps choose the scalings), which depends only on the head and can be passed in precomputed (`beta`).

The minimum: min g >= -U(-c) (`first_order_certificate(problem, sense="min")`).
"""
from __future__ import annotations

import numpy as np

from attncert.certify.diagonal_bilinear_bound import diagonal_scalings, head_bilinear_bound
from attncert.head.reduced_geometry import ReducedGeometry, reduced_geometry
from attncert.head.problem import HeadProblem
from attncert.head.rounding import gamma


def _varying_score_envelope(problem: HeadProblem) -> np.ndarray:
    """Per-token bound on |float64 - exact| of the varying query's score interval endpoints.

    A computed dot product of length k errs by at most gamma_k times the same product of absolute
    values, and such products are bounded by norms: || |x| |W| ||_2 <= ||x||_2 ||W||_F,
    || |z| + r ||_2 <= ||z||_2 + r sqrt(d). Chains (q0, k0_j, W_Q k0_j, W_K q0) are all shorter than
    K = 3d + 3d_h + 50. (The fixed query's score intervals and every value interval: `head.reduced_geometry`.)
    """
    d, dh, r = problem.d, problem.d_head, problem.radius
    g = 4.0 * gamma(3 * d + 3 * dh + 50)
    fQ, fK = float(np.linalg.norm(problem.W_Q)), float(np.linalg.norm(problem.W_K))
    zn = np.linalg.norm(problem.Z0, axis=1)
    nbQ, nbK = float(np.linalg.norm(problem.b_Q)), float(np.linalg.norm(problem.b_K))
    q_env = (zn[problem.query_index] + r * np.sqrt(d)) * fQ + nbQ
    k_env = (zn + r * np.sqrt(d)) * fK + nbK
    return g * q_env * k_env / np.sqrt(dh)


def attention_lp_max(l: np.ndarray, u: np.ndarray, W: np.ndarray, chunk: int = 512) -> tuple[float, int, float]:
    """max over s in [l, u] of sum e^{s} W / sum e^{s}; returns (value, k, X).

    k = number of (largest-W) tokens at their upper score; X = largest |exponent| evaluated.
    Every threshold k is evaluated with its own log-sum-exp shift S_k = max(max_{i<k} u_i, max_{i>=k} l_i),
    so its largest weight is exactly 1: no 0/0 when every e^{l_j} underflows and no overflow, whatever
    the score widths (O(n^2) work, in row chunks).
    """
    order = np.argsort(-W, kind="stable")
    l, u, W = l[order], u[order], W[order]
    n = W.size
    cols = np.arange(n)
    vals, X = np.empty(n + 1), 0.0
    for k0 in range(0, n + 1, chunk):
        ks = np.arange(k0, min(n + 1, k0 + chunk))
        E = np.where(cols[None, :] < ks[:, None], u[None, :], l[None, :])  # exponents at threshold k
        S = E.max(axis=1, keepdims=True)
        e = np.exp(E - S)
        vals[ks] = (e @ W) / e.sum(axis=1)
        X = max(X, float((S - E).max()))
    k = int(np.argmax(vals))
    return float(vals[k]), k, X


def bilinear_bound(problem: HeadProblem) -> float:
    """beta >= max_{||x||, ||y|| <= 1} x W_Q W_K^T y^T for the problem's norm (computed once per head)."""
    return head_bilinear_bound(problem.W_Q, problem.W_K, problem.norm)


def bilinear_scalings(problem: HeadProblem) -> tuple[np.ndarray, np.ndarray] | None:
    """The diagonal scalings (s, t) of the l_inf bilinear bound (`diagonal_bilinear_bound`; None for l2): what a
    certificate stores beside beta, so that a checker can evaluate the same bound."""
    return diagonal_scalings(problem.W_Q, problem.W_K) if problem.norm == "linf" else None


def score_value_intervals(problem: HeadProblem, beta: float | None = None, geometry: ReducedGeometry | None = None
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sound (l, u, W_lo, W_hi): s_j in [l_j, u_j], w_j in [W_lo_j, W_hi_j] over the perturbation set.

    beta: `bilinear_bound(problem)` (varying query only); it depends only on W_Q, W_K and the norm, so
    a caller certifying many units of one head can compute it once. geometry: `reduced_geometry(problem)`, if the
    caller has it.
    """
    r = problem.radius
    dual = problem.dual_norm
    geo = reduced_geometry(problem, geometry)
    W_lo, W_hi = geo.value_range()
    if problem.mode == "fixed":
        return (*geo.score_range(), W_lo, W_hi)
    s0 = geo.s0
    eps_s_varying = _varying_score_envelope(problem)
    sq = np.sqrt(problem.d_head)
    q0 = problem.nominal_query()
    K0 = problem.Z0 @ problem.W_K + problem.b_K  # (n, d_h)
    WQk = K0 @ problem.W_Q.T  # (n, d): row j = W_Q k0_j
    lin = r * (np.abs(WQk).sum(1) if problem.norm == "linf" else np.linalg.norm(WQk, axis=1))
    lin = lin + r * dual(problem.W_K @ q0)
    beta = bilinear_bound(problem) if beta is None else beta
    rad = (lin + r * r * beta) / sq
    return s0 - rad - eps_s_varying, s0 + rad + eps_s_varying, W_lo, W_hi


def first_order_certificate(problem: HeadProblem, sense: str = "max", beta: float | None = None,
                            geometry: ReducedGeometry | None = None) -> float:
    """Sound upper bound on max g (sense="max") or sound lower bound on min g (sense="min").

    beta: optional precomputed `bilinear_bound(problem)` (varying query; see `score_value_intervals`).
    geometry: optional precomputed `reduced_geometry(problem)` (sense "max" only: "min" bounds the negated
    specification, whose geometry differs).
    """
    if sense == "min":
        if geometry is not None:
            raise ValueError("geometry is the maximised problem's: pass it with sense='max' only")
        return -first_order_certificate(problem.negated(), "max", beta)
    if sense != "max":
        raise ValueError(f"sense must be 'max' or 'min'; got {sense!r}")
    l, u, _, W = score_value_intervals(problem, beta, geometry)
    val, _, X = attention_lp_max(l, u, W)
    Wmax = float(np.abs(W).max())
    margin = 2.0 * gamma(problem.n + 6) * (1.0 + X) * Wmax
    # capped by the trivial bound g <= max_j W_j (the LP value is a convex combination of the W_j)
    return min(val + margin + 1e-300 * (1.0 + problem.n * Wmax), float(W.max()))


def first_order_certificate_min(problem: HeadProblem) -> float:
    """Sound lower bound on min g."""
    return first_order_certificate(problem, sense="min")
