"""Exact worst case of one attention head with a fixed query, as a certified bracket [lo, hi].

Problem (fixed query, `HeadProblem.mode == "fixed"`): with s_j = s0_j + u_s.delta_j and
w_j = w0_j + u_w.delta_j (`head.fixed_query.fixed_query_reduction`),

    g* = max_{delta}  sum_j e^{s_j} w_j / sum_j e^{s_j}     s.t.  ||delta_j|| <= r  for every token j.

Separable root. Because sum_j e^{s_j} > 0,

    g(delta) >= t   <=>   sum_j e^{s_j} (w_j - t) >= 0,

so g* >= t  <=>  F(t) >= 0 with

    F(t) = sum_j h_j(t),    h_j(t) = max_{(sigma, omega) in P} e^{s0_j + sigma} (w0_j - t + omega),

where P is the 2-D image of the ball (`projected_ball`). F is convex and strictly decreasing, and
F(g*) = 0. Dinkelbach's iteration t_{k+1} = g(delta(t_k)) (the value at the maximizer of F(t_k)) is
Newton's method on F (F'(t) = -sum_j e^{s_j(t)} by Danskin): monotone and superlinear near the root,
but it can crawl far from it when scores move a lot (F behaves like an exponential; each step then
gains ~1/(score slope)). It is therefore safeguarded by bisection on a bracket [t_lo, t_hi]: probing
F(m) >= 0 yields a maximizer with g >= m (new t_lo), F(m) < 0 yields g* < m (new t_hi).

Per-token maximum. For fixed sigma the best omega is omega_max(sigma) (upper boundary of P).
* linf: the boundary is a polyline. On edge k, phi(lam) = exp(A + ds lam)(B + dw lam), lam in [0, 1];
  phi'(lam) = 0 at lam* = -B/dw - 1/ds, a maximum iff ds dw < 0, with value exp(A + ds lam*)(-dw/ds).
  The maximum over the polyline is the largest of the d + 1 vertex values and the interior stationary
  values: exact, vectorized over tokens x edges.
* l2: f(t) = exp(A + a cos t)(B + p cos t + q sin t), t in [0, pi]. f need not be unimodal (when
  B + omega_max < 0 it can have two local maxima), so it is maximized by branch and bound over angle
  cells. In each cell, Newton on f' (clipped to the cell) gives an expansion point x0, and Taylor's
  theorem with a bound M3 on |f'''| over the cell gives, for |t - x0| <= H,
      f(t) <= f(x0) + f'(x0)(t - x0) + (f''(x0)/2 + M3 H/6)(t - x0)^2,
  maximized in closed form on the cell. Cells whose bound is below the best value found (plus
  tolerance) are discarded, the others are halved. At a polished strict local maximum f'(x0) ~ 0, so
  the bound is tight without deep refinement. This returns both a feasible maximizer and a proven upper
  bound on every token's maximum. Each cell is evaluated in its own log-scale (its exponent at x0), and
  a derivative-free bound (E monotone in t, closed-form max of L on the cell) covers the cells where the
  Taylor bound would overflow.

Log space. Scores can move by hundreds or thousands, so e^{s_j} spans far more than the double range.
Every per-token maximum is returned as (scale c_j, factor m_j), h_j <= m_j e^{c_j}, and F is summed in
units of e^C, C = max_j c_j (`rescale`: never NaN, a log form below e^-700, +inf above e^709). Only the
sign of F matters, so nothing depends on where the weights sit in the exponent range.

Certified bracket.
* lo = the lower end of problem.value(Z) for an explicit perturbation Z (checked with problem.in_ball): a
  feasible value, recomputed directly from the tokens, minus a bound on its rounding (the reduction's data
  errors and the softmax's), so that lo <= g(Z) in real arithmetic (`attncert audit` checks it).
* hi = a t with F_up(t) < 0, where F_up is a sound upper bound on the exact F (exact real arithmetic
  on the float64 data of the problem). Then every feasible delta has sum_j e^{s_j}(w_j - t) < 0,
  i.e. g* < hi. F_up covers
  (i) data error: the computed s0_j, w0_j, u_s, u_w (extended precision, `fixed_query_reduction`) and the
      computed boundary of P (`geometry_error`) differ from exact ones by at most
      eps_s,j = err_s0_j + r ||err_us||_* + geom_s (scores) and eps_w,j likewise (values). For any exact point (s, w)
      there is a computed one
      (s', w') with e^s (w - t) <= e^{s'} (w' - t + kappa_j), kappa_j = eps_w + 2 eps_s (M_j + eps_w),
      M_j = |w0_j - t| + R_w. So h_j^exact(t) <= h_j^computed(t - kappa_j): the per-token maxima are
      evaluated with w0_j shifted up by kappa_j.
  (ii) evaluation error of the per-token maximum. The shifted b_j = w0_j - t + kappa_j is formed
      with absolute error beta_j = gamma_3 (|w0_j| + |t| + kappa_j) and passed as b_j + 2 beta_j.
      A zonotope candidate e^{x}(b + omega_k) (vertex) or e^{x}(-dw/ds) (edge stationary point,
      |x| <= |A_j| + 3 R_s + 2 inside the window) is then computed, with its rescalings to the token's and
      to the common scale (arguments up to |A_j| + 3 R_s + 4), with relative error at most
      rho_j = gamma_32 (4 + |A_j| + 3 R_s): exponent errors times one plus a few correctly rounded
      operations. Since v -> v + 2 rho |v| is increasing, the inflated computed maximum bounds the
      exact maximum of all candidates. Stationary points with computed lam* in [-eta, 1 + eta]
      (eta = 1e-9 + 8u(|b|/|dw| + 1/ds + 1) > the rounding error of lam*) use the unconstrained line
      maximum, which can only overestimate; outside that window the exact lam* is outside [0, 1]. For the ellipse every
      cell bound is
      inflated at its own expansion point (relative rho_j, plus cos/sin error gamma_16 E (|b|+|p|+|q|)
      times the Taylor factors). The margins are thus relative to the value at the point, not to the
      largest score: no e^{2 R_s} blow-up.
  (iii) the sum over tokens: gamma_{n+2} sum_j |h_j| plus n 1e-300, in units of e^C (relative to the
      largest token scale, not absolute: an absolute 1e-290 would dominate F_up once every weight at the
      maximizer is below e^-667 and send hi to 1e5-1e268).
  Starting from lo, hi = lo + F_up(lo)/D (one Newton step, D = sum of attention numerators at the
  maximizers, in the same units), enlarged until F_up(hi) < 0 is verified, and capped by the trivial
  bound top = max_j (w0_j + R_w + eps_w,j) rounded outward (hi = top if F_up < 0 is never verified below
  it). Dinkelbach can stop at a kink of F (F(t_lo) > 0 tiny, the root far away: the dominant token's
  maximizer jumps to a vertex with a weight e^-hundreds smaller just above t_lo), so while the certified
  bracket is wider than 1e-10 of the spread its midpoint m is probed: a maximizer of F(m) with g > m
  restarts Dinkelbach from there (new lo), F_up(m) < 0 makes m the new hi, neither stops the loop.
  `status` is "ok" when the bracket is <= 1e-10 of the spread, else why not (trivial_cap, iterations,
  precision); the bracket is certified either way.

Value spread (the yardstick for the bracket width): max_j (w0_j + R_w) - min_j (w0_j - R_w), the range
of values any token can read. `relative_width = (hi - lo) / value_spread`.

The minimum is max of -g: `exact_worst_case(problem, sense="min")` (bracket of min g; its witness
attains the upper end hi).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from attncert.head.problem import HeadProblem
from attncert.certify.dinkelbach import DinkelbachStep, safeguarded_dinkelbach
from attncert.head.fixed_query import fixed_query_reduction
from attncert.certify.token_max import EXP_MAX, token_max, token_sum
from attncert.head.projected_ball import projected_ball
from attncert.head.rounding import LD, UNIT_ROUNDOFF, gamma, gamma_ld

MAX_DINKELBACH = 200
TARGET_RELATIVE_WIDTH = 1e-10  # the bracket width aimed at, relative to the value spread


@dataclass
class ExactResult:
    lo: float  # certified lower end of the bracket of the optimum
    hi: float  # certified upper end
    witness: np.ndarray  # (n, d) feasible tokens; value(witness) = lo for "max", = hi for "min"
    witness_value: float
    sense: str
    iterations: int  # Dinkelbach iterations
    f_evaluations: int  # evaluations of F (incl. certification)
    seconds: float
    value_spread: float
    # "ok" (relative width <= TARGET_RELATIVE_WIDTH), else why not: "trivial_cap: ...",
    # "iterations: ..." or "precision: ..." (the bracket is still certified, only wider)
    status: str = "ok"

    @property
    def width(self) -> float:
        return self.hi - self.lo

    @property
    def relative_width(self) -> float:
        return self.width / self.value_spread if self.value_spread > 0 else 0.0


# ----------------------------------------------------------------------------------------------
# the separable root
# ----------------------------------------------------------------------------------------------
def _feasible(problem: HeadProblem, delta: np.ndarray) -> np.ndarray:
    """Z0 + delta, shrunk toward Z0 if rounding (~u |Z0| per coordinate) pushed it outside the ball."""
    for shrink in (0.0, 4e-16, 1e-14, 1e-12, 1e-9, 1e-6):
        Z = problem.Z0 + delta * (1.0 - shrink)
        if problem.in_ball(Z):
            return Z
    raise RuntimeError("could not build a feasible witness (rounding)")


def attained_lower_end(problem: HeadProblem, Z: np.ndarray) -> float:
    """A float <= g(Z) in real arithmetic (fixed query): g evaluated in extended precision, less its error bound.

    Each dot product of length k errs by at most gamma^L_k times the same product of absolute values (`rounding`):
    scores by err_s (the chain q = z_i W_Q + b_Q, k_j = z_j W_K + b_K, q.k_j / sqrt(d_h)), values by err_w
    (w_j = (z_j W_V + b_V).c). Score errors move g by at most (e^{2 max err_s} - 1)(max w - min w), value errors
    by max err_w; the softmax and the weighted sum add 8 gamma^L_{2n+10} max |w|; the result is rounded down.
    """
    L = LD
    ZL = np.asarray(Z, dtype=np.float64).astype(L)
    i, dh = problem.query_index, problem.d_head
    q = problem.Z0[i].astype(L) @ problem.W_Q.astype(L) + problem.b_Q.astype(L)
    s = (ZL @ problem.W_K.astype(L) + problem.b_K.astype(L)) @ q / np.sqrt(L(dh))
    w = (ZL @ problem.W_V.astype(L) + problem.b_V.astype(L)) @ problem.c.astype(L)
    e = np.exp(s - s.max())
    g = float((e @ w) / e.sum()) if np.all(np.isfinite(e)) else math.nan
    absZ = np.abs(np.asarray(Z, dtype=np.float64))
    q_abs = np.abs(problem.Z0[i]) @ np.abs(problem.W_Q) + np.abs(problem.b_Q)
    s_abs = (absZ @ np.abs(problem.W_K) + np.abs(problem.b_K)) @ q_abs / math.sqrt(dh)
    w_abs = (absZ @ np.abs(problem.W_V) + np.abs(problem.b_V)) @ np.abs(problem.c)
    k = 2 * problem.d + dh + 10
    err_s = 4.0 * gamma_ld(k) * float(np.max(s_abs))
    err_w = 4.0 * gamma_ld(k) * float(np.max(w_abs))
    wf = w.astype(np.float64)
    err = (err_w + math.expm1(2.0 * err_s) * float(wf.max() - wf.min() + 2.0 * err_w)
           + 8.0 * gamma_ld(2 * problem.n + 10) * float(np.max(np.abs(wf))))
    out = g - err * (1.0 + 1e-6) - 2.0 * UNIT_ROUNDOFF * abs(g)  # the float64 rounding of g
    return math.nextafter(out, -math.inf) if math.isfinite(out) else -math.inf


def _ratio(A, sigma, w) -> float:
    """sum_j e^{A_j + sigma_j} w_j / sum_j e^{A_j + sigma_j} (log-sum-exp shift: the largest weight is 1)."""
    x = A + sigma
    e = np.exp(x - x.max())
    return float(e @ w / e.sum())


def exact_worst_case(problem: HeadProblem, sense: str = "max", max_iter: int = MAX_DINKELBACH) -> ExactResult:
    """Certified bracket [lo, hi] of max g (sense="max") or min g (sense="min"), fixed query."""
    if problem.mode != "fixed":
        raise ValueError("the exact worst case is for a fixed query (mode='fixed'); the varying query is NP-hard")
    if sense == "min":
        r = exact_worst_case(problem.negated(), "max", max_iter)
        return ExactResult(-r.hi, -r.lo, r.witness, -r.witness_value, "min", r.iterations, r.f_evaluations,
                           r.seconds, r.value_spread, r.status)
    if sense != "max":
        raise ValueError(f"sense must be 'max' or 'min'; got {sense!r}")
    t_start = time.perf_counter()
    data = fixed_query_reduction(problem)
    s0, w0 = data.s0, data.w0
    image = projected_ball(data.u_s, data.u_w, problem.radius, problem.norm)
    R_s, R_w = image.R_s, image.R_w
    shift = float(s0.max()) + R_s
    A = s0 - shift
    spread = float((w0 + R_w).max() - (w0 - R_w).min())
    eps_s = data.err_s0 + problem.radius * problem.dual_norm(data.err_us) + image.geometry_error[0]
    eps_w = data.err_w0 + problem.radius * problem.dual_norm(data.err_uw) + image.geometry_error[1]
    # trivial bound g <= max_j w_j, outward rounded (also above the float evaluation of any g(Z))
    top_j = w0 + R_w + eps_w
    top = float(top_j.max() + gamma(2 * (problem.d + problem.d_head + problem.n) + 16)
                * (np.abs(top_j).max() + R_w + np.abs(w0).max()) + 1e-300)

    # Dinkelbach (Newton on F) from the nominal value, safeguarded by bisection on [t_lo, t_hi]
    t_lo = _ratio(A, np.zeros_like(A), w0)  # a feasible value (delta = 0)
    t_hi = float((w0 + R_w).max())  # g <= max_j w_j
    tol = 1e-15 * max(spread, abs(t_lo))
    no_err = np.zeros_like(A)

    def step(probe: float) -> DinkelbachStep:
        tm = token_max(image, A, w0 - probe, no_err)
        v = _ratio(A, tm.sigma, w0 + tm.omega)  # value at the maximizer of F(probe)
        terms, _ = token_sum(tm)
        return DinkelbachStep(v, float(terms.sum()) < 0, tm)

    t_lo, best, t_hi, iters = safeguarded_dinkelbach(step, t_lo, t_hi, None, tol, max_iter)
    converged = iters < max_iter or t_hi - t_lo <= tol
    evals = iters

    def witness_of(point):
        try:
            Z = _feasible(problem, np.zeros_like(problem.Z0) if point is None else point.delta())
        except RuntimeError:  # a ball below the rounding of Z0 + delta: the nominal point (lo stays sound)
            Z = problem.Z0.copy()
        return Z, attained_lower_end(problem, Z)

    witness, lo = witness_of(best)
    if attained_lower_end(problem, problem.Z0) > lo:  # cannot happen in exact arithmetic; guard the witness
        witness, lo = problem.Z0.copy(), attained_lower_end(problem, problem.Z0)

    # certification: find hi with F_up(hi) < 0 (F_up in units of e^C, C the largest token scale)
    rel_err = gamma(32) * (4.0 + np.abs(A) + 3.0 * R_s)

    def F_up(tt: float):
        M = np.abs(w0 - tt) + R_w
        kappa = eps_w + 2.0 * eps_s * (M + eps_w)  # data error, as a shift of t per token
        beta = gamma(3) * (np.abs(w0) + abs(tt) + kappa)  # rounding of w0 - tt + kappa
        tmu = token_max(image, A, w0 - tt + kappa + 2.0 * beta, rel_err)
        h, C = token_sum(tmu)
        D = np.exp(np.minimum(A + tmu.sigma - C, EXP_MAX)).sum()  # slope at the maximizers, same units
        return float(h.sum() + gamma(problem.n + 2) * np.abs(h).sum() + 1e-300 * problem.n), float(D)

    def certify(lo_: float, hi_known: float, known: bool) -> tuple[float, bool, int]:
        """(hi, verified, evaluations): one Newton step from lo_, enlarged until F_up(hi) < 0."""
        Fl, D = F_up(lo_)
        k = 1
        step_ = max(Fl, 0.0) / D if D > 0 else np.inf
        hi_ = lo_ + 1.01 * step_ + 1e-15 * spread + 4 * np.spacing(abs(lo_))
        for _ in range(60):
            if not hi_ < hi_known:
                break
            Fh, _ = F_up(hi_)
            k += 1
            if Fh < 0:
                return hi_, True, k
            hi_ = lo_ + 4.0 * (hi_ - lo_)
        return hi_known, known, k

    hi, verified, k = certify(lo, top, False)
    evals += k
    # Dinkelbach stops when a Newton step gains <= tol. At a kink of F (the maximizer of a dominant
    # token jumps to another vertex just above t, its weight dropping by e^{-hundreds}) F(t) > 0 can be
    # tiny while the root is far away; the certified bracket then stays wide. Bisect it: a midpoint m
    # with F(m) >= 0 yields a better feasible value (and Dinkelbach restarts from there), F_up(m) < 0
    # lowers hi; if neither, the midpoint is inside the rounding margins and we stop.
    for _ in range(200):
        if not hi - lo > TARGET_RELATIVE_WIDTH * spread:
            break
        m = 0.5 * (lo + hi)
        s_m = step(m)
        evals += 1
        if s_m.value > m:
            t2, best2, _, it2 = safeguarded_dinkelbach(step, s_m.value, hi, s_m.point, tol, max_iter)
            iters += it2
            evals += it2
            W2, lo2 = witness_of(best2)
            if lo2 > lo:
                witness, lo = W2, lo2
                hi, verified, k = certify(lo, hi, verified)
                evals += k
                continue
        Fm, _ = F_up(m)
        evals += 1
        if Fm < 0:
            hi, verified = m, True
        else:
            break
    hi = max(hi, lo)
    res = ExactResult(float(lo), float(hi), witness, problem.value(witness), "max", iters, evals,
                      time.perf_counter() - t_start, spread)
    if res.relative_width > TARGET_RELATIVE_WIDTH:
        if not verified:
            res.status = (f"trivial_cap: F_up(t) < 0 not verified below max_j (w0_j + R_w); hi is that bound "
                          f"(R_s = {R_s:.4g})")
        elif not converged:
            res.status = f"iterations: Dinkelbach stopped after {iters} iterations (R_s = {R_s:.4g})"
        else:
            res.status = (f"precision: the sign of F is not decidable within the rounding margins "
                          f"(largest relative term error {float(rel_err.max()):.2g}, R_s = {R_s:.4g})")
    return res


def exact_worst_case_min(problem: HeadProblem) -> ExactResult:
    """Certified bracket of min g (fixed query); the witness attains the upper end."""
    return exact_worst_case(problem, sense="min")
