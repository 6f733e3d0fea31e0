"""Duals for many keys from a one-parameter family of token programs (fixed query).

For a fixed multiplier t of the normalization row, the relaxation separates by token, and token j's program
is E_lj times one universal program of the scalar w = wt_j - t (its value offset in objective units): the rows
do not depend on E_lj or t (all tokens of a fixed query share h = R_s and P; the data errors differ by ~1e-13).
So the duals of all n tokens come from G << n solved token programs: G values of w (at the tokens with the
largest weight bounds, and spread over the range), solved together as G independent blocks (tau = 1); the
relaxation's multiplier t is the root of sum_j E_lj Psi(wt_j - t) = 0 for Psi interpolated on the grid (two
passes: the grid is re-centred at the first root); token j's dual is E_lj times the linear interpolation of
its two neighbours' duals (a convex combination of points of K^* is in K^*). The bound is then computed from
that dual by `support_bound.bound_from_dual`, sound for any dual: the interpolation decides only how tight it
is. Cost: two solves of G token programs, O(n) for the root, O(n d) for the bound.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from attncert.certify.second_order.relaxation import weight_coefficients
from attncert.certify.second_order.support_bound import bound_from_dual
from attncert.certify.second_order.token_program import (LAM, UW, VW, build_program, cutting_plane_rounds,
                                                         edge_window, solve_program)

FAMILY_ABOVE = 48  # more kept tokens than this: duals from the one-parameter family of token programs
FAMILY_TOP = 64  # grid points placed at the w of the tokens with the largest weight bounds ...
FAMILY_SPREAD = 32  # ... and spread evenly over the range of w


def _virtual_data(D, w: np.ndarray):
    """The token program at value offsets w (objective units) with weight scale E_l = 1, as relaxation data:
    token j's program is E_lj times this one at w = wt_j - t (the rows do not depend on E_l or on t)."""
    G = w.size
    eps = np.full(G, float(np.max(D.eps_s)))
    return replace(D, A=np.full(G, D.R_s) + eps, w0=D.g0 + w * D.rho_o, eps_s=eps, eps_w=np.zeros(G), tail=0.0)


def _vertex_edges(D, chain, w: np.ndarray, near: int, grid: int) -> np.ndarray:
    """(G, K) edge indices (plus 2: rows 0, 1 are the sigma bounds) around the vertex maximizing
    e^sigma (w rho_o + omega) for each w, and a global sigma grid."""
    E = np.exp(chain.sigma - chain.sigma.max())
    kv = np.argmax(E[None, :] * (w[:, None] * D.rho_o + chain.omega[None, :]), axis=1)
    return edge_window(kv, chain, near, grid)


def _solve_tokens(D, upper_cone, mono, geometry, norm, ladder, near, grid, rounds, log):
    """Solve the (independent, tau = 1) token programs of D; returns (prog, z, per-token primal values)."""
    k = weight_coefficients(D.A, np.full(D.A.size, D.R_s), D.eps_s, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, mono)
    if norm == "l2":
        prog = build_program(D, upper_cone, mono, ellipse=geometry, k=k, fix_tau=True)
        _, _, x, z, lg = solve_program(prog, ladder)
        log += lg
    else:
        chain, hs, hw, hb = geometry
        edges = _vertex_edges(D, chain, (D.w0 - D.g0) / D.rho_o, near, grid)
        for prog, _, _, _, x, z, lg in cutting_plane_rounds(D, upper_cone, mono, edges, (hs, hw, hb), chain, ladder,
                                                            rounds, k=k, fix_tau=True):
            log += lg
    if x is None:
        return prog, None, None
    lam, Uw, Vw = x[prog.var(LAM)], x[prog.var(UW)], x[prog.var(VW)]
    psi = k["wt"] * (1.0 + k["kappa"] * lam) + k["c_V"] * Vw + k["c_U"] * Uw
    return prog, z, psi


def _root(El: np.ndarray, wt: np.ndarray, grid_w: np.ndarray, psi: np.ndarray, lo: float, hi: float) -> float:
    """t with sum_j El_j Psi(wt_j - t) = 0 for Psi interpolated on the grid (linear beyond its ends)."""
    slope_lo = (psi[1] - psi[0]) / (grid_w[1] - grid_w[0]) if grid_w.size > 1 else 1.0
    slope_hi = (psi[-1] - psi[-2]) / (grid_w[-1] - grid_w[-2]) if grid_w.size > 1 else 1.0

    def phi(t):
        w = wt - t
        v = np.interp(w, grid_w, psi)
        v = np.where(w < grid_w[0], psi[0] + (w - grid_w[0]) * slope_lo, v)
        v = np.where(w > grid_w[-1], psi[-1] + (w - grid_w[-1]) * slope_hi, v)
        return float(El @ v)

    while phi(hi) > 0 and hi - lo < 1e6:
        lo, hi = hi, hi + 2.0 * (hi - lo) + 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if phi(mid) > 0:
            lo = mid
        else:
            hi = mid
    return hi


def _grid(wt: np.ndarray, weight: np.ndarray, t: float, span: tuple) -> np.ndarray:
    top = wt[np.argsort(-weight)[:FAMILY_TOP]] - t
    g = np.unique(np.concatenate([top, np.linspace(span[0], span[1], FAMILY_SPREAD)]))
    keep = np.concatenate([[True], np.diff(g) > 1e-9 * max(1.0, float(np.abs(g).max()))])
    return g[keep]


def family_bound(D, upper_cone, mono, geometry, gens, norm, ladder, near, grid, rounds):
    """Bound from duals of the one-parameter family of token programs (see the module docstring).

    Returns (bound in objective units, status, the multiplier t, log [(solver, status, seconds)])."""
    n = D.A.size
    k = weight_coefficients(D.A, np.full(n, D.R_s), D.eps_s, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, mono)
    El, wt = k["El"], k["wt"]
    log = []
    t = 0.0
    span = (float(wt.min()) - 1.5, float(wt.max()) + 0.5)
    for _ in range(2):
        gw = _grid(wt, El * k["Ehat"], t, span)
        prog_v, z_v, psi = _solve_tokens(_virtual_data(D, gw), upper_cone, mono, geometry, norm, ladder, near, grid,
                                         rounds, log)
        if z_v is None:
            return math.inf, "solver_error", math.nan, log
        t = _root(El, wt, gw, psi, -1.0, 2.0)
    real = build_program(D, upper_cone, mono, k=k)
    w = wt - t
    j = np.clip(np.searchsorted(gw, w) - 1, 0, gw.size - 1)
    j1 = np.minimum(j + 1, gw.size - 1)
    span_w = np.where(j1 > j, gw[j1] - gw[j], 1.0)
    al = np.clip(np.where(j1 > j, (w - gw[j]) / span_w, 0.0), 0.0, 1.0)
    z = np.zeros(real.b.size)
    z[real.families["norm"][0]] = t
    for name, (start, dim) in real.families.items():
        if name == "norm":
            continue
        sv, dv = prog_v.families[name]
        for c in range(dim):
            z[start + dim * np.arange(n) + c] = El * ((1.0 - al) * z_v[sv + dv * j + c] + al * z_v[sv + dv * j1 + c])
    bound, _ = bound_from_dual(real, z, gens, norm)
    return bound, log[-1][1], t, log


