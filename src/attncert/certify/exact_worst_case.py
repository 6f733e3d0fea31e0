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
  bound on every token's maximum.

Certified bracket.
* lo = problem.value(Z) for an explicit perturbation Z (checked with problem.in_ball): a feasible
  value, recomputed directly from the tokens.
* hi = a t with F_up(t) < 0, where F_up is a sound upper bound on the exact F (exact real arithmetic
  on the float64 data of the problem). Then every feasible delta has sum_j e^{s_j}(w_j - t) < 0,
  i.e. g* < hi. F_up covers
  (i) data error: the computed s0_j, w0_j, u_s, u_w (extended precision, `fixed_query_reduction`) and the
      computed boundary of P (`geometry_error`) differ from exact ones by at most
      eps_s,j = err_s0_j + r ||err_us||_* + geom_s (scores) and eps_w,j likewise (values). For any exact point (s, w) there is a computed one
      (s', w') with e^s (w - t) <= e^{s'} (w' - t + kappa_j), kappa_j = eps_w + 2 eps_s (M_j + eps_w),
      M_j = |w0_j - t| + R_w. So h_j^exact(t) <= h_j^computed(t - kappa_j): the per-token maxima are
      evaluated with w0_j shifted up by kappa_j.
  (ii) evaluation error of the per-token maximum. The shifted b_j = w0_j - t + kappa_j is formed
      with absolute error beta_j = gamma_3 (|w0_j| + |t| + kappa_j) and passed as b_j + 2 beta_j.
      A zonotope candidate e^{x}(b + omega_k) (vertex) or e^{x}(-dw/ds) (edge stationary point,
      |x| <= |A_j| + 3 R_s + 2 inside the window) is then computed with relative error at most
      rho_j = gamma_16 (4 + |A_j| + 3 R_s): exponent error times one plus a few correctly rounded
      operations. Since v -> v + 2 rho |v| is increasing, the inflated computed maximum bounds the
      exact maximum of all candidates. Stationary points with computed lam* in [-eta, 1 + eta]
      (eta = 1e-9 + 8u(|b|/|dw| + 1/ds + 1) > the rounding error of lam*) use the unconstrained line
      maximum, which can only overestimate; outside that window the exact lam* is outside [0, 1]. For the ellipse every cell bound is
      inflated at its own expansion point (relative rho_j, plus cos/sin error gamma_16 E (|b|+|p|+|q|)
      times the Taylor factors). The margins are thus relative to the value at the point, not to the
      largest score: no e^{2 R_s} blow-up.
  (iii) the sum over tokens: gamma_{n+2} sum_j |h_j|, plus 1e-290 for exp underflow.
  Starting from lo, hi = lo + F_up(lo)/D (one Newton step, D = sum of attention numerators at the
  maximizers), enlarged until F_up(hi) < 0 is verified.

Value spread (the yardstick for the bracket width): max_j (w0_j + R_w) - min_j (w0_j - R_w), the range
of values any token can read. `relative_width = (hi - lo) / value_spread`.

The minimum is max of -g: `exact_worst_case(problem, sense="min")` (bracket of min g; its witness
attains the upper end hi).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from attncert.head.problem import HeadProblem
from attncert.certify.dinkelbach import DinkelbachStep, safeguarded_dinkelbach
from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.projected_ball import Ellipse2D, Zonotope2D, projected_ball
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

LAMBDA_WINDOW = 1e-9
G16 = gamma(16)
MAX_DINKELBACH = 200


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

    @property
    def width(self) -> float:
        return self.hi - self.lo

    @property
    def relative_width(self) -> float:
        return self.width / self.value_spread if self.value_spread > 0 else 0.0


# ----------------------------------------------------------------------------------------------
# per-token maximum of exp(A_j + sigma) (B_j + omega) over the upper boundary of P
# ----------------------------------------------------------------------------------------------
@dataclass
class TokenMax:
    upper: np.ndarray  # (n,) upper bound on the per-token maximum (exact for the polyline)
    sigma: np.ndarray  # (n,) boundary point of a maximizer (feasible)
    omega: np.ndarray
    delta: callable  # () -> (n, d) perturbations realising (sigma, omega)


def zonotope_token_max(Zt: Zonotope2D, A: np.ndarray, B: np.ndarray, rel_err: np.ndarray) -> TokenMax:
    """max over the polyline of exp(A_j + sigma)(B_j + omega), for all tokens j at once.

    `rel_err[j]` bounds the relative rounding error of one candidate value; since v -> v + 2 rho |v|
    is increasing, inflating the computed maximum bounds the exact maximum over all candidates.
    """
    n = A.shape[0]
    sig, om = Zt.sigma, Zt.omega
    vert = np.exp(A[:, None] + sig[None, :]) * (B[:, None] + om[None, :])  # (n, d+1)
    kv = np.argmax(vert, axis=1)
    best = vert[np.arange(n), kv]
    edge = np.minimum(kv, Zt.n_edges - 1)
    lam = np.where(kv >= Zt.n_edges, 1.0, 0.0)
    ds, dw = Zt.dsigma, Zt.domega
    idx = np.nonzero((ds > 0) & (dw < 0))[0]  # edges where an interior maximum is possible
    if idx.size:
        dsk, dwk = ds[idx], dw[idx]
        Bk = B[:, None] + om[None, idx]  # (n, m)
        ratio = dsk / dwk  # < 0
        lam_star = -Bk / dwk[None, :] - 1.0 / dsk[None, :]
        # window: 1e-9 plus the rounding error of lam*, so a true interior point is never missed; a
        # lam* just outside [0, 1] gives the unconstrained line maximum, which can only overestimate
        eta = LAMBDA_WINDOW + 8 * UNIT_ROUNDOFF * (np.abs(Bk) / -dwk[None, :] + 1.0 / dsk[None, :] + 1.0)
        ok = (lam_star > -eta) & (lam_star < 1.0 + eta)
        expo = A[:, None] + sig[None, idx] - Bk * ratio[None, :] - 1.0
        val = np.where(ok, np.exp(np.minimum(expo, 700.0)) * (-1.0 / ratio)[None, :], -np.inf)
        ke = np.argmax(val, axis=1)
        ve = val[np.arange(n), ke]
        use = ve > best
        best = np.where(use, ve, best)
        edge = np.where(use, idx[ke], edge)
        lam = np.where(use, np.clip(lam_star[np.arange(n), ke], 0.0, 1.0), lam)
    sigma = sig[edge] + lam * ds[edge]
    omega = om[edge] + lam * dw[edge]
    return TokenMax(best + 2.0 * rel_err * np.abs(best), sigma, omega, lambda: Zt.perturbations(edge, lam))


def _ellipse_derivs(A, B, a, p, q, t):
    """f, f', f'', E of f(t) = E(t) L(t), E = exp(A + a cos t), L = B + p cos t + q sin t."""
    c, s = np.cos(t), np.sin(t)
    E = np.exp(A + a * c)
    L = B + p * c + q * s
    L1 = -p * s + q * c
    L2 = -p * c - q * s
    E1 = -a * s  # E'/E
    E2 = a * a * s * s - a * c  # E''/E
    return E * L, E * (E1 * L + L1), E * (E2 * L + 2.0 * E1 * L1 + L2), E


def _newton_in_cell(A, B, a, p, q, t, lo, hi, steps=5):
    """Newton on f'(t) = 0 started at t, every iterate clipped to its cell [lo, hi]."""
    for _ in range(steps):
        _, f1, f2, _ = _ellipse_derivs(A, B, a, p, q, t)
        step = np.where(f2 != 0, f1 / np.where(f2 == 0, 1.0, f2), 0.0)
        t = np.clip(t - step, lo, hi)
    return t


def ellipse_token_max(El: Ellipse2D, A: np.ndarray, B: np.ndarray, rel_err: np.ndarray,
                      rel_tol: float = 1e-14, grid: int = 24, max_levels: int = 60,
                      max_cells: int = 4096) -> TokenMax:
    """Branch and bound over t in [0, pi] of f_j(t) = exp(A_j + a cos t)(B_j + p cos t + q sin t).

    Every cell [lo, hi] gets an expansion point x0 (Newton on f' from the centre, clipped to the cell)
    and the bound, for h = t - x0, |h| <= H = max(x0 - lo, hi - x0):
        f(x0 + h) <= f(x0) + f1 h + (f2/2 + M3 H/6) h^2,    f1, f2 = f', f'' at x0, M3 >= max_cell |f'''|,
    maximized in closed form over h in [lo - x0, hi - x0]. At a polished strict local maximum f1 ~ 0
    and the bound equals f(x0) up to O(f1^2), so no deep refinement is needed; cells with no
    competitive maximum are discarded, the others halved.
    Derivative bounds: |E^(k)| <= e_max (1, a, a^2 + a, a^3 + 3a^2 + a) with e_max = exp(A + a cos lo)
    (cos decreases on [0, pi]); |L| <= |B| + R, |L^(k)| <= R for k >= 1 (R = hypot(p, q)); Leibniz.
    Rounding, at the expansion point: exp's argument and the factor carry relative error rel_err[j];
    cos/sin make L, f', f'' err by gamma_16 E (|B| + |p| + |q|) times their derivative factors; each
    cell bound is inflated by twice these amounts.
    """
    n = A.shape[0]
    a, p, q = El.a, El.p, El.q
    R = np.hypot(p, q)
    absB = np.abs(B)
    tok = np.repeat(np.arange(n), grid)
    edges = np.linspace(0.0, np.pi, grid + 1)
    lo = np.tile(edges[:-1], n)
    hi = np.tile(edges[1:], n)
    best = np.full(n, -np.inf)
    best_t = np.zeros(n)
    pruned_ub = np.full(n, -np.inf)
    upper = np.full(n, -np.inf)
    for level in range(max_levels):
        At, Bt = A[tok], B[tok]
        x0 = _newton_in_cell(At, Bt, a, p, q, 0.5 * (lo + hi), lo, hi)
        f, f1, f2, E = _ellipse_derivs(At, Bt, a, p, q, x0)
        # lower bound: best expansion point per token
        order = np.lexsort((-f, tok))
        first = np.ones(order.size, dtype=bool)
        first[1:] = tok[order][1:] != tok[order][:-1]
        bc = order[first]
        upd = f[bc] > best[tok[bc]]
        best[tok[bc][upd]] = f[bc][upd]
        best_t[tok[bc][upd]] = x0[bc][upd]
        # upper bound per cell
        emax = np.exp(At + a * np.cos(lo))
        M3 = emax * ((a ** 3 + 3 * a * a + a) * (absB[tok] + R) + (3 * a * a + 6 * a + 1) * R)
        H = np.maximum(x0 - lo, hi - x0)
        c2 = 0.5 * f2 + M3 * H / 6.0
        hl, hh = lo - x0, hi - x0
        qe = np.maximum(f1 * hl + c2 * hl * hl, f1 * hh + c2 * hh * hh)
        hs = np.clip(-f1 / np.where(c2 < 0, 2.0 * c2, -1.0), hl, hh)
        qs = np.where(c2 < 0, f1 * hs + c2 * hs * hs, -np.inf)
        # rounding at x0: exp/product (rel_err), cos/sin inside L, f', f'' (G16 E |.|), Taylor terms
        Lb = np.abs(Bt) + abs(p) + abs(q)
        trig = Lb + (a * Lb + R) * H + ((a * a + a) * Lb + (2 * a + 1) * R) * H * H
        err = 2.0 * (rel_err[tok] * np.abs(f) + G16 * E * trig) + 1e-14 * (np.abs(f1) * H + np.abs(c2) * H * H)
        ub0 = f + np.maximum(qe, qs)
        ub = ub0 + err
        # pruning only decides where to refine; every discarded cell's (inflated) bound is kept
        keep = ub0 > best[tok] + rel_tol * np.abs(best[tok]) + 1e-300
        if (~keep).any():
            np.maximum.at(pruned_ub, tok[~keep], ub[~keep])
        if not keep.any() or level == max_levels - 1 or 2 * keep.sum() > max_cells:
            upper = pruned_ub.copy()
            if keep.any():
                np.maximum.at(upper, tok[keep], ub[keep])
            break
        # halve the surviving cells
        mid = 0.5 * (lo[keep] + hi[keep])
        tok = np.repeat(tok[keep], 2)
        lo, hi = np.stack([lo[keep], mid], 1).ravel(), np.stack([mid, hi[keep]], 1).ravel()
    upper = np.maximum(upper, best)
    c, s = np.cos(best_t), np.sin(best_t)
    return TokenMax(upper, a * c, p * c + q * s, lambda: El.perturbations(best_t))


def token_max(image, A: np.ndarray, B: np.ndarray, rel_err: np.ndarray) -> TokenMax:
    if isinstance(image, Zonotope2D):
        return zonotope_token_max(image, A, B, rel_err)
    return ellipse_token_max(image, A, B, rel_err)


# ----------------------------------------------------------------------------------------------
# the separable root
# ----------------------------------------------------------------------------------------------
def _feasible(problem: HeadProblem, delta: np.ndarray) -> np.ndarray:
    """Z0 + delta, shrunk by a few ulps if rounding pushed it outside the ball."""
    for shrink in (0.0, 4e-16, 1e-14, 1e-12, 1e-9):
        Z = problem.Z0 + delta * (1.0 - shrink)
        if problem.in_ball(Z):
            return Z
    raise RuntimeError("could not build a feasible witness (rounding)")


def _ratio(A, sigma, w):
    x = A + sigma
    e = np.exp(x - x.max())
    return float(e @ w / e.sum()), e.sum() * np.exp(x.max())


def exact_worst_case(problem: HeadProblem, sense: str = "max", max_iter: int = MAX_DINKELBACH) -> ExactResult:
    """Certified bracket [lo, hi] of max g (sense="max") or min g (sense="min"), fixed query."""
    if problem.mode != "fixed":
        raise ValueError("the exact worst case is for a fixed query (mode='fixed'); the varying query is NP-hard")
    if sense == "min":
        r = exact_worst_case(problem.negated(), "max", max_iter)
        return ExactResult(-r.hi, -r.lo, r.witness, -r.witness_value, "min", r.iterations, r.f_evaluations,
                           r.seconds, r.value_spread)
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

    # Dinkelbach (Newton on F) from the nominal value, safeguarded by bisection on [t_lo, t_hi]
    t_lo, _ = _ratio(A, np.zeros_like(A), w0)  # a feasible value (delta = 0)
    t_hi = float((w0 + R_w).max())  # g <= max_j w_j
    tol = 1e-15 * max(spread, abs(t_lo))
    no_err = np.zeros_like(A)

    def step(probe: float) -> DinkelbachStep:
        tm = token_max(image, A, w0 - probe, no_err)
        v, _ = _ratio(A, tm.sigma, w0 + tm.omega)  # value at the maximizer of F(probe)
        return DinkelbachStep(v, float(tm.upper.sum()) < 0, tm)

    t_lo, best, t_hi, iters = safeguarded_dinkelbach(step, t_lo, t_hi, None, tol, max_iter)
    evals = iters
    best_delta = np.zeros_like(problem.Z0) if best is None else best.delta()
    witness = _feasible(problem, best_delta)
    lo = problem.value(witness)
    if problem.value(problem.Z0) > lo:  # cannot happen in exact arithmetic; guard the witness
        witness, lo = problem.Z0.copy(), problem.value(problem.Z0)

    # certification: find hi with F_up(hi) < 0
    eps_s = data.err_s0 + problem.radius * problem.dual_norm(data.err_us) + image.geometry_error[0]
    eps_w = data.err_w0 + problem.radius * problem.dual_norm(data.err_uw) + image.geometry_error[1]
    rel_err = gamma(16) * (4.0 + np.abs(A) + 3.0 * R_s)

    def F_up(tt: float):
        M = np.abs(w0 - tt) + R_w
        kappa = eps_w + 2.0 * eps_s * (M + eps_w)  # data error, as a shift of t per token
        beta = gamma(3) * (np.abs(w0) + abs(tt) + kappa)  # rounding of w0 - tt + kappa
        tmu = token_max(image, A, w0 - tt + kappa + 2.0 * beta, rel_err)
        h = tmu.upper
        _, D = _ratio(A, tmu.sigma, w0)
        return float(h.sum() + gamma(problem.n + 2) * np.abs(h).sum() + 1e-290), D

    Fl, D = F_up(lo)
    evals += 1
    step = max(Fl, 0.0) / D
    hi = lo + 1.01 * step + 1e-15 * spread + 4 * np.spacing(abs(lo))
    for _ in range(40):
        Fh, _ = F_up(hi)
        evals += 1
        if Fh < 0:
            break
        step = 4.0 * (hi - lo)
        hi = lo + step
    else:
        top = float((w0 + R_w + eps_w).max())  # trivial bound: g <= max_j w_j
        hi = top + 1e-12 * abs(top) + 1e-300
    return ExactResult(float(lo), float(hi), witness, float(lo), "max", iters, evals,
                       time.perf_counter() - t_start, spread)


def exact_worst_case_min(problem: HeadProblem) -> ExactResult:
    """Certified bracket of min g (fixed query); the witness attains the upper end."""
    return exact_worst_case(problem, sense="min")
