"""The key factor's support cut: one key's Lagrangian term bounded by its exact maximum over the key's own set.

In the factored varying-query relaxation (docs/certificate.md §5.1, §5.2) key j's weight is
a_j = E_l,j (base_j + kappa_j lam_j) and its value moment is E_l,j (V_w + Ehat_j U_w) rho_w; at every lifted true
point, with x = sigma + beta + e + hk_j + eps_j the key's score shift in the key factor's range [0, 2 hk_j + 2 eps_j],

    base + kappa lam = base e^x,     V_w + Ehat U_w = base e^x omegahat   (up to the rounding of kappa and Ehat),

where (sigma, omega) lies in the keys' image P of the ball, beta in [-b, b] (the bilinear coordinate) and e in
[-eps_j, eps_j] (the score's data error), independently. For a multiplier t of the normalization the key's term of
the Lagrangian is E_l,j times alpha_j (base + kappa lam) + gamma (V_w + Ehat U_w), alpha_j = wt_j - t,
gamma = rho_w / rho_o. Its maximum over the key's set, per unit base, is the support function

    delta_j(t) = max { e^x (alpha_j + gamma omegahat) : (sigma, omega) in P,
                                                         x in [sigma + hk - b, sigma + hk + b + 2 eps] },

and the **support cut** is the row, valid at every lifted true point because base >= 0,

    delta_j(t) base - alpha_j (base + kappa lam) - gamma (V_w + Ehat U_w) >= 0.

At the t of the relaxation's optimum it makes the key factor exact in the direction the objective reads it: the
relaxation's per-key slack (a weight up to the secant at the mean score while the value is read at the extreme
atoms) no longer adds up over keys. Any t gives a valid row; t decides only how tight it is.

**Computing delta without a solver.** For fixed sigma the expression is monotone in e^x (an end of the x range) and
linear in omega (the upper or lower chain of P): four arcs, upper / lower chain times the low / high end of x. On
one edge of a chain, u in [0, 1], the arc (E, Omega)(u) = e^{x_0 + L u} (1, gamma (omegahat_0 + D u)) has
E' Omega'' - E'' Omega' = L^2 E^2 gamma D, one sign on the whole edge: a convex arc whose tangent turns by less
than pi (E increases), so it lies in the triangle of its chord and its two end tangents. The support function of
the arc in direction (alpha, 1) is therefore at most the largest of the three corners; where the tangents are
nearly parallel (angle < 1e-6) or their intersection falls outside the edge's box, the box [E_0, E_1] x [Omega
range] replaces the triangle. delta_j is the largest corner over all edges, plus MARGIN x the row's magnitude
(Ehat (|alpha| + gamma max(W, 1)), W the largest |omegahat|): it covers the chain vertices' rounding (about gamma_d
R), the float coefficients kappa alpha and gamma Ehat of the row against the exact identity above, the float
E_l's shift of x, the corners' arithmetic and the subtraction delta - alpha. The corners do not depend on t, so
every t costs one (keys x corners) product.

The query token's factor has base tau and its own image; it gets no support cut. Which multipliers: the
optimum's is the relaxation's optimal value (the program is homogeneous apart from the normalization), between the
origin's estimate 0 and the first-order bound, so a first solve carries SUPPORT_START x that bound
(`start_support`) and later solves add their own multiplier while its cut removes enough of the solved point
(`support_excess`).
"""
from __future__ import annotations

import math

import numpy as np

SUPPORT_START = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # the first solve's multipliers, x the first-order bound
MARGIN = 1e-9  # relative to the row's magnitude (module docstring)
PARALLEL = 1e-6  # tangents closer than this angle (radians): the edge's box instead of its triangle


def arc_corners(sigma: np.ndarray, omegahat: np.ndarray, x_lo: float, x_hi: float,
                gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """(E, Omega) of points whose convex hull holds every (e^x, gamma omegahat e^x) of the key's set: P's upper
    chain (sigma ascending, omegahat its values; the lower chain is its point reflection) with x = sigma + x_lo and
    x = sigma + x_hi (x_lo <= x_hi: the offsets of the low and the high end of the key factor's exponent)."""
    Es, Os = [], []
    for s, w in ((sigma, omegahat), (-sigma[::-1], -omegahat[::-1])):
        for off in (x_lo, x_hi):
            E, O = _edge_corners(s, w, off, gamma)
            Es.append(E)
            Os.append(O)
    return np.concatenate(Es), np.concatenate(Os)


def _edge_corners(s: np.ndarray, w: np.ndarray, off: float, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """The vertices of one chain at exponent offset `off`, and per edge the tangents' intersection (or its box)."""
    E = np.exp(s + off)
    O = gamma * w * E
    E0, E1, O0, O1 = E[:-1], E[1:], O[:-1], O[1:]
    L = s[1:] - s[:-1]
    dw = w[1:] - w[:-1]
    # tangents per unit u: E_k (L, gamma (dw + w_k L)) at both ends
    d0x, d0y = E0 * L, gamma * E0 * (dw + w[:-1] * L)
    d1x, d1y = E1 * L, gamma * E1 * (dw + w[1:] * L)
    det = d0x * d1y - d0y * d1x
    rx, ry = E1 - E0, O1 - O0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s0 = (rx * d1y - ry * d1x) / det
        s1 = (d0x * ry - d0y * rx) / det
        Tx, Ty = E0 + s0 * d0x, O0 + s0 * d0y
    lo_o = np.minimum(np.minimum(O0, O1), np.minimum(gamma * w[:-1] * E1, gamma * w[1:] * E0))
    hi_o = np.maximum(np.maximum(O0, O1), np.maximum(gamma * w[:-1] * E1, gamma * w[1:] * E0))
    norms = np.hypot(d0x, d0y) * np.hypot(d1x, d1y)
    ok = (np.abs(det) > PARALLEL * norms) & (s0 >= 0) & (s1 >= 0) & np.isfinite(Tx) & np.isfinite(Ty)
    ok &= (Tx >= E0) & (Tx <= E1) & (Ty >= lo_o) & (Ty <= hi_o)
    box = ~ok
    Ex = np.concatenate([E, Tx[ok], E0[box], E0[box], E1[box], E1[box]])
    Oy = np.concatenate([O, Ty[ok], lo_o[box], hi_o[box], lo_o[box], hi_o[box]])
    return Ex, Oy


def support_offsets(E: np.ndarray, O: np.ndarray, alpha: np.ndarray, gamma: float, Ehat: np.ndarray,
                    W: float) -> np.ndarray:
    """delta_j = max over the corners of alpha_j E + Omega, plus MARGIN x Ehat_j (|alpha_j| + gamma max(W, 1)):
    the right side of the support cut of each key (per unit base). Non-finite where the inputs overflow."""
    best = np.full(alpha.shape, -np.inf)
    for start in range(0, E.size, 4096):  # (keys x 4096) at a time
        e, o = E[start:start + 4096], O[start:start + 4096]
        best = np.maximum(best, np.max(alpha[:, None] * e[None, :] + o[None, :], axis=1))
    return best + MARGIN * Ehat * (np.abs(alpha) + gamma * max(W, 1.0))


def support_rows(D, hk: np.ndarray, kappa: np.ndarray, Ehat: np.ndarray, wt: np.ndarray, chain,
                 ts) -> list[tuple[np.ndarray, np.ndarray, float, np.ndarray]]:
    """Per multiplier t the coefficients of the keys' support cuts on (base, lam, V_w, U_w):
    (delta - alpha, alpha kappa, gamma, gamma Ehat) of s = (delta - alpha) base - alpha kappa lam - gamma V_w -
    gamma Ehat U_w >= 0. D: key-centered `VaryingData` (the query token last); hk, kappa, Ehat, wt: the program's
    per-token arrays; chain: the keys' `UpperChainFacets`. A key whose row does not come out finite gets the
    trivial row base >= 0. ValueError if a t is not finite."""
    ts = np.asarray(ts, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(ts)):
        raise ValueError("a support cut needs a finite multiplier t")
    m = D.n - 1
    if m < 1 or ts.size == 0:
        return []
    gamma = float(D.rho_w / D.rho_o)
    act_s, act_b = D.active[:m, 0], D.active[:m, 3]
    b = float(np.max(D.scales[:m, 3] * act_b))
    lo = float(np.min(hk[:m])) - b
    hi = float(np.max(hk[:m])) + b + 2.0 * float(np.max(D.eps[:m]))
    sigma = chain.chain.sigma * float(np.max(act_s))
    omegahat = chain.chain.omega / D.rho_w
    E, O = arc_corners(sigma, omegahat, lo, hi, gamma)
    W = float(np.max(np.abs(omegahat)))
    out = []
    for t in ts:
        alpha = wt[:m] - t
        delta = support_offsets(E, O, alpha, gamma, Ehat[:m], W)
        c_base = delta - alpha
        c_lam, c_U = alpha * kappa[:m], gamma * Ehat[:m]
        ok = np.isfinite(c_base) & np.isfinite(c_lam) & np.isfinite(c_U)
        out.append((np.where(ok, c_base, 1.0), np.where(ok, c_lam, 0.0), np.where(ok, gamma, 0.0),
                    np.where(ok, c_U, 0.0)))
    return out


def support_row(D, hk: np.ndarray, kappa: np.ndarray, Ehat: np.ndarray, wt: np.ndarray, chain, t: float,
                memo: dict) -> tuple:
    """`support_rows` at the one multiplier t, kept in memo (a dict of one unit's builds) by t."""
    key = ("support", float(t))
    if key not in memo:
        memo[key] = support_rows(D, hk, kappa, Ehat, wt, chain, [t])[0]
    return memo[key]


def start_support(fo_obj: float) -> list:
    """The first solve's multipliers: SUPPORT_START x the first-order bound in the program's objective units (module
    docstring); none where that bound is not finite and positive."""
    if not (math.isfinite(fo_obj) and fo_obj > 0):
        return []
    return [f * fo_obj for f in SUPPORT_START]


def support_excess(rows: tuple, El: np.ndarray, base: np.ndarray, lam: np.ndarray, Vw: np.ndarray,
                   Uw: np.ndarray) -> float:
    """How much one multiplier's cuts (`support_rows`' tuple) would remove from a solved point of the keys:
    sum_j E_l,j max(0, -s_j) (objective units); every array over the keys."""
    c_base, c_lam, c_V, c_U = rows
    s = c_base * base - c_lam * lam - c_V * Vw - c_U * Uw
    return float(np.sum(El * np.maximum(-s, 0.0)))
