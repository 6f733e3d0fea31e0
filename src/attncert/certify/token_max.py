"""Per-token maxima of the separable root (`exact_worst_case`), in log scale.

For token j and a level t, maximize h_j = exp(A_j + sigma) (B_j + omega) over the upper boundary of the
2-D image P of the ball (`head.projected_ball`): a concave polyline (linf, exact over its vertices and
edges) or an ellipse arc (l2, branch and bound over cells with a Taylor bound). Every maximum is kept as
(upper_j, scale_j) with h_j <= upper_j e^{scale_j}, so tokens whose weights differ by e^{hundreds} are
summed relative to the largest scale (`token_sum`) without underflow; `rescale` moves a value between
scales and never returns NaN. See docs/exact_worst_case.md, sections 2-3.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncert.head.projected_ball import Ellipse2D, Zonotope2D
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

LAMBDA_WINDOW = 1e-9
G16 = gamma(16)
EXP_MAX = 709.0  # exp(709) < the largest double
EXP_UNDER = -700.0  # below this a rescaled term is evaluated in log form (it would underflow)


def rescale(m: np.ndarray, dc: np.ndarray) -> np.ndarray:
    """m * e^{dc} elementwise, never NaN and never below the real value by more than a relative
    u (2 + |dc|) (callers carry that in their margins):

    * dc >= -700: m * exp(min(dc, 709)); m = 0 gives 0; a positive value with dc > 709 is +inf (a
      negative one stays a finite number above the real value);
    * dc < -700 (the term is below e^-700 |m|): positive m gives exp(dc + log m)(1 + 1e-12) + 5e-324
      (log form: no underflow of the factor; the padding covers the rounding of the log form and
      subnormal results), non-positive m gives 0 (>= the real, non-positive value).
    """
    m, dc = np.broadcast_arrays(np.asarray(m, dtype=np.float64), np.asarray(dc, dtype=np.float64))
    if dc.size == 0 or (dc.min() >= EXP_UNDER and dc.max() <= EXP_MAX):  # fast path: no clipping needed
        with np.errstate(over="ignore"):  # |m| e^dc beyond the double range: +-inf, still an upper bound
            return m * np.exp(dc)
    out = np.zeros(m.shape)
    mid = dc >= EXP_UNDER
    mm, dd = m[mid], dc[mid]
    with np.errstate(over="ignore"):  # |m| e^709 beyond the double range: +-inf, still an upper bound
        v = mm * np.exp(np.minimum(dd, EXP_MAX))
    out[mid] = np.where((dd > EXP_MAX) & (mm > 0), np.inf, v)
    low = ~mid & (m > 0)
    out[low] = np.exp(dc[low] + np.log(m[low])) * (1.0 + 1e-12) + 5e-324
    return out


# ----------------------------------------------------------------------------------------------
# per-token maximum of exp(A_j + sigma) (B_j + omega) over the upper boundary of P, in log scale:
# h_j <= upper_j * e^{scale_j}
# ----------------------------------------------------------------------------------------------
@dataclass
class TokenMax:
    upper: np.ndarray  # (n,) upper bound on the per-token maximum, in units of e^{scale}
    scale: np.ndarray  # (n,) log-scale c_j of token j (an exponent A_j + sigma near its maximizer)
    sigma: np.ndarray  # (n,) boundary point of a maximizer (feasible)
    omega: np.ndarray
    delta: callable  # () -> (n, d) perturbations realising (sigma, omega)


def zonotope_token_max(Zt: Zonotope2D, A: np.ndarray, B: np.ndarray, rel_err: np.ndarray) -> TokenMax:
    """max over the polyline of exp(A_j + sigma)(B_j + omega), for all tokens j at once.

    Every candidate (vertex, or interior stationary point of an edge) is a pair (x, m): value e^x m.
    Token j's scale c_j is the largest exponent among its positive candidates (if it has none, the
    smallest exponent of all), so the rescaled values m e^{x - c_j} of the competitive candidates
    neither overflow nor underflow, whatever the score range. `rel_err[j]` bounds the relative rounding
    error of one rescaled candidate value (including the later rescaling of the token to a common
    scale); since v -> v + 2 rho |v| is increasing, inflating the computed maximum bounds the exact
    maximum over all candidates.
    """
    n = A.shape[0]
    rows = np.arange(n)
    sig, om = Zt.sigma, Zt.omega
    X = A[:, None] + sig[None, :]  # (n, d+1) vertex exponents
    M = B[:, None] + om[None, :]  # and factors
    ds, dw = Zt.dsigma, Zt.domega
    idx = np.nonzero((ds > 0) & (dw < 0))[0]  # edges where an interior maximum is possible
    pos = M > 0
    c_pos = np.where(pos, X, -np.inf).max(axis=1)
    c_all = X.min(axis=1)
    if idx.size:
        dsk, dwk = ds[idx], dw[idx]
        Bk = M[:, idx]  # B + omega at the start of each such edge, (n, m)
        ratio = dsk / dwk  # < 0
        lam_star = -Bk / dwk[None, :] - 1.0 / dsk[None, :]
        # window: 1e-9 plus the rounding error of lam*, so a true interior point is never missed; a
        # lam* just outside [0, 1] gives the unconstrained line maximum, which can only overestimate
        eta = LAMBDA_WINDOW + 8 * UNIT_ROUNDOFF * (np.abs(Bk) / -dwk[None, :] + 1.0 / dsk[None, :] + 1.0)
        ok = (lam_star > -eta) & (lam_star < 1.0 + eta)
        expo = np.where(ok, A[:, None] + sig[None, idx] - Bk * ratio[None, :] - 1.0, -np.inf)
        c_pos = np.maximum(c_pos, expo.max(axis=1))  # stationary values -dw/ds are positive
    # scale: the largest exponent among positive candidates, else the smallest of all
    c = np.where(np.isfinite(c_pos), c_pos, c_all)
    val = rescale(M, X - c[:, None])
    k = np.argmax(val, axis=1)
    best = val[rows, k]
    e_k = np.minimum(k, Zt.n_edges - 1)
    l_k = np.where(k >= Zt.n_edges, 1.0, 0.0)
    if idx.size:
        m_e = np.broadcast_to(-1.0 / ratio, expo.shape)  # the stationary values' factors -dw/ds
        ve = np.where(ok, rescale(m_e, np.where(ok, expo, c[:, None]) - c[:, None]), -np.inf)
        ke = np.argmax(ve, axis=1)
        be = ve[rows, ke]
        use = be > best
        best = np.where(use, be, best)
        e_k = np.where(use, idx[ke], e_k)
        l_k = np.where(use, np.clip(lam_star[rows, ke], 0.0, 1.0), l_k)
    sigma = sig[e_k] + l_k * ds[e_k]
    omega = om[e_k] + l_k * dw[e_k]
    return TokenMax(best + 2.0 * rel_err * np.abs(best), c, sigma, omega, lambda: Zt.perturbations(e_k, l_k))


def _scaled_derivs(a, B, p, q, t):
    """(f, f', f'') / E(t) at t for f(t) = E(t) L(t), E = exp(A + a cos t), L = B + p cos t + q sin t."""
    c, s = np.cos(t), np.sin(t)
    L = B + p * c + q * s
    L1 = -p * s + q * c
    L2 = -p * c - q * s
    E1 = -a * s  # E'/E
    E2 = a * a * s * s - a * c  # E''/E
    return L, E1 * L + L1, E2 * L + 2.0 * E1 * L1 + L2


def _newton_in_cell(B, a, p, q, t, lo, hi, steps=5):
    """Newton on f'(t) = 0 started at t, every iterate clipped to its cell [lo, hi] (E cancels)."""
    for _ in range(steps):
        _, f1, f2 = _scaled_derivs(a, B, p, q, t)
        step = np.where(f2 != 0, f1 / np.where(f2 == 0, 1.0, f2), 0.0)
        t = np.clip(t - step, lo, hi)
    return t


def _log_key(c: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A lexicographic key (sign, sign * log|value|) ordering the values e^c m (no overflow)."""
    s = np.sign(m)
    mag = np.where(m == 0, 0.0, s * (c + np.log(np.where(m == 0, 1.0, np.abs(m)))))
    return s, mag


def ellipse_token_max(El: Ellipse2D, A: np.ndarray, B: np.ndarray, rel_err: np.ndarray,
                      rel_tol: float = 1e-14, grid: int = 24, max_levels: int = 60,
                      max_cells: int = 4096) -> TokenMax:
    """Branch and bound over t in [0, pi] of f_j(t) = exp(A_j + a cos t)(B_j + p cos t + q sin t).

    Every cell [lo, hi] gets an expansion point x0 (Newton on f' from the centre, clipped to the cell)
    and its own log-scale cc = A_j + a cos x0: the cell is evaluated in units of e^cc (E(x0) = 1), so
    nothing overflows or underflows however far the scores move. For h = t - x0, |h| <= H =
    max(x0 - lo, hi - x0),
        f(x0 + h) <= f(x0) + f1 h + (f2/2 + M3 H/6) h^2,    f1, f2 = f', f'' at x0, M3 >= max_cell |f'''|,
    maximized in closed form over h in [lo - x0, hi - x0]. At a polished strict local maximum f1 ~ 0
    and the bound equals f(x0) up to O(f1^2), so no deep refinement is needed; cells with no
    competitive maximum are discarded, the others halved.
    Derivative bounds: |E^(k)| <= e_max (1, a, a^2 + a, a^3 + 3a^2 + a), e_max = exp(a (cos lo - cos x0))
    (cos decreases on [0, pi]); |L| <= |B| + R, |L^(k)| <= R for k >= 1 (R = hypot(p, q)); Leibniz.
    A second, crude bound per cell needs no derivatives: E is monotone on the cell and
    L(t) = B + R cos(t - phi) has a closed-form maximum Lmax on it, so f <= E(lo) Lmax if Lmax > 0 and
    f <= E(hi) Lmax otherwise; it bounds (and discards) the cells where the Taylor bound would overflow
    (a (cos lo - cos x0) > 700).
    Rounding, at the expansion point: the exponent cc and every later rescaling carry relative error
    rel_err[j] (each cell bound is inflated by 2 rel_err |bound|); cos/sin make L, f', f'' err by
    gamma_16 (|B| + |p| + |q|) times their derivative factors (inflated by twice these amounts).
    Cells are compared across scales in log form; the token scale is the scale of its best point.
    """
    n = A.shape[0]
    a, p, q = El.a, El.p, El.q
    R = float(np.hypot(p, q))
    phi = float(np.arctan2(q, p))  # q >= 0: phi in [0, pi]
    absB = np.abs(B)
    slack = gamma(8) * (1.0 + 3.0 * a)  # relative error of a computed exp(a (cos x - cos y))
    tok = np.repeat(np.arange(n), grid)
    edges = np.linspace(0.0, np.pi, grid + 1)
    lo = np.tile(edges[:-1], n)
    hi = np.tile(edges[1:], n)
    best_c, best_m, best_t = np.zeros(n), np.full(n, -np.inf), np.zeros(n)
    best_s, best_mag = np.full(n, -2.0), np.zeros(n)  # log key of the best value (-2: none yet)
    rec_tok, rec_c, rec_ub = [], [], []
    for level in range(max_levels):
        Bt = B[tok]
        x0 = _newton_in_cell(Bt, a, p, q, 0.5 * (lo + hi), lo, hi)
        cos0 = np.cos(x0)
        cc = A[tok] + a * cos0  # this cell's log-scale
        f, f1, f2 = _scaled_derivs(a, Bt, p, q, x0)
        # lower bound: best expansion point per token (compared in log form)
        s, mag = _log_key(cc, f)
        order = np.lexsort((-mag, -s, tok))
        first = np.ones(order.size, dtype=bool)
        first[1:] = tok[order][1:] != tok[order][:-1]
        bc = order[first]
        tb = tok[bc]
        upd = (s[bc] > best_s[tb]) | ((s[bc] == best_s[tb]) & (mag[bc] > best_mag[tb]))
        u_t, u_c = tb[upd], bc[upd]
        best_s[u_t], best_mag[u_t] = s[u_c], mag[u_c]
        best_c[u_t], best_m[u_t], best_t[u_t] = cc[u_c], f[u_c], x0[u_c]
        # Taylor upper bound per cell (units of e^cc)
        dlo = a * (np.cos(lo) - cos0)  # >= 0
        big = dlo > EXP_MAX - 9.0
        emax = np.exp(np.minimum(dlo, EXP_MAX - 9.0)) * (1.0 + slack)
        M3 = emax * ((a ** 3 + 3 * a * a + a) * (absB[tok] + R) + (3 * a * a + 6 * a + 1) * R)
        H = np.maximum(x0 - lo, hi - x0)
        c2 = 0.5 * f2 + M3 * H / 6.0
        hl, hh = lo - x0, hi - x0
        qe = np.maximum(f1 * hl + c2 * hl * hl, f1 * hh + c2 * hh * hh)
        hs = np.clip(-f1 / np.where(c2 < 0, 2.0 * c2, -1.0), hl, hh)
        qs = np.where(c2 < 0, f1 * hs + c2 * hs * hs, -np.inf)
        # rounding at x0: cos/sin inside L, f', f'' (G16 |.|), Taylor terms
        Lb = np.abs(Bt) + abs(p) + abs(q)
        trig = Lb + (a * Lb + R) * H + ((a * a + a) * Lb + (2 * a + 1) * R) * H * H
        err = 2.0 * (rel_err[tok] * np.abs(f) + G16 * trig) + 1e-14 * (np.abs(f1) * H + np.abs(c2) * H * H)
        taylor = np.where(big, np.inf, f + np.maximum(qe, qs))
        # crude bound: E monotone on the cell, L <= Lmax
        inside = (phi >= lo - 1e-12) & (phi <= hi + 1e-12)
        cmax = np.where(inside, 1.0, np.maximum(np.cos(lo - phi), np.cos(hi - phi)))
        Lmax = Bt + R * cmax + 32 * UNIT_ROUNDOFF * (np.abs(Bt) + R)
        ehi = np.exp(np.maximum(a * (np.cos(hi) - cos0), -745.0)) * (1.0 - slack)
        crude = np.where(Lmax > 0, np.where(big, np.inf, emax * Lmax), ehi * Lmax)
        dec = np.minimum(taylor, crude)  # decides refine / discard
        ub = np.minimum(taylor + err, crude)
        ub = ub + 2.0 * rel_err[tok] * np.abs(ub)  # sound, in units of e^cc
        # pruning only decides where to refine; every discarded cell's (inflated) bound is kept
        bm = best_m[tok]
        keep = rescale(dec, cc - best_c[tok]) > bm + rel_tol * np.abs(bm) + 1e-300
        stop = not keep.any() or level == max_levels - 1 or 2 * keep.sum() > max_cells
        done = np.ones_like(keep) if stop else ~keep
        rec_tok.append(tok[done]), rec_c.append(cc[done]), rec_ub.append(ub[done])
        if stop:
            break
        # halve the surviving cells
        mid = 0.5 * (lo[keep] + hi[keep])
        tok = np.repeat(tok[keep], 2)
        lo, hi = np.stack([lo[keep], mid], 1).ravel(), np.stack([mid, hi[keep]], 1).ravel()
    T = np.concatenate(rec_tok)
    conv = rescale(np.concatenate(rec_ub), np.concatenate(rec_c) - best_c[T])
    upper = np.full(n, -np.inf)
    np.maximum.at(upper, T, conv)
    upper = np.maximum(upper, best_m)
    c, s = np.cos(best_t), np.sin(best_t)
    return TokenMax(upper, best_c, a * c, p * c + q * s, lambda: El.perturbations(best_t))


def token_max(image, A: np.ndarray, B: np.ndarray, rel_err: np.ndarray) -> TokenMax:
    if isinstance(image, Zonotope2D):
        return zonotope_token_max(image, A, B, rel_err)
    return ellipse_token_max(image, A, B, rel_err)


def token_sum(tm: TokenMax) -> tuple[np.ndarray, float]:
    """The per-token maxima in units of e^C, C = max_j scale_j (each term <= |upper_j|): (terms, C)."""
    C = float(tm.scale.max())
    return rescale(tm.upper, tm.scale - C), C
