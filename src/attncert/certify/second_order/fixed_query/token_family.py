"""Duals for many keys from a one-parameter family of token programs (fixed query).

For a fixed multiplier t of the normalization row, the relaxation separates by token, and token j's program
is E_lj times one universal program of the scalar w = wt_j - t (its value offset in objective units): the rows
do not depend on E_lj or t (all tokens of a fixed query share h = R_s and P; the data errors differ by ~1e-13).
So the duals of all n tokens come from G << n solved token programs: G values of w (at the tokens with the
largest weight bounds, for each t of the pass, and spread over the range), solved together as G independent
blocks (tau = 1), each scaled by the weight share its dual carries (`_block_scale`) and its dual scaled back; where
the interior-point dual is inexact (`_refines`) the outer-approximation LPs of `token_solve.refined_solutions`
refine the duals on the unscaled blocks, and their last point gives the values Psi(w) of the grid (otherwise the
solver's point does). With Psi(w) the token program's
optimum (convex, increasing, slope 1 + kappa lam), F(t) = sum_j E_lj Psi(wt_j - t) is convex and decreasing and
the relaxation's multiplier is its root: the first pass (t = 0) gives the root of the interpolated F; later passes
solve a Newton step from the left of the root and a chord (or midpoint) step from its right, until the Newton
step times the weight band is small against |bound - t| or against the bound's margin below the first-order bound
(FAMILY_PASSES at most). Token j's dual at a solved t is
E_lj times its grid point's dual (heavy tokens) or the linear interpolation of its two neighbours' (a convex
combination of points of K^* is in K^*); the solver's and the best refined dual are
both used, each at its own t and at the normalization multiplier of `support_bound.best_multiplier`. The bound is
computed from each dual by `support_bound.bound_from_dual`, sound for any dual (the family decides only how tight
it is), and the smallest is kept.

Facets (linf): the first pass places them by cutting planes (`token_solve.cutting_plane_rounds`, from a window
around each w's estimated vertex). Psi(w) is one program of w, so its atoms U/lam, V/(tau - lam) move with w: a
later pass starts from the edges under the atoms of the last pass's two grid points around each of its w (and
CARRY_WIDTH neighbours; `_carried`) and solves with at most CARRY_ROUNDS rounds. Only atoms of a solve that ended
"optimal" are carried; otherwise the pass starts afresh. Which facets a solve is given decides only how tight its
dual is, never whether the bound is sound.

Cost: 2 to FAMILY_PASSES (typically 2) solves of G token programs (the first with up to `rounds` cutting-plane
rounds, later ones CARRY_ROUNDS), O(n) per root step, O(n d) per bound. On the GPT-2-sized units of
`bench/bench_second_order.py` (--unit-ns) the carried facets with one round end tighter than three fresh rounds,
and the LPs' duals of a linf solve that ended optimal never gave the smaller bound (they cost 40% of the time).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from attncert.certify.second_order.relaxation.rows import weight_coefficients
from attncert.certify.second_order.fixed_query.support_bound import best_multiplier, bound_from_dual, unit_generators
from attncert.certify.second_order.fixed_query.token_program import LAM, UW, VW, build_program
from attncert.certify.second_order.fixed_query.token_solve import (
    QUICK,
    atom_edges,
    cutting_plane_rounds,
    edge_window,
    refined_solutions,
    solve_program,
)

FAMILY_ABOVE = 48  # more kept tokens than this: duals from the one-parameter family of token programs
FAMILY_TOP = 64  # grid points placed at the w of the tokens with the largest weight bounds ...
FAMILY_SPREAD = 32  # ... and spread evenly over the range of w
FAMILY_PASSES = 6  # solves of the grid at most: at t = 0, at the interpolated root, then bracketing steps
FAMILY_GAIN = 0.5  # another pass while the Newton step, times the weight band Ehat, exceeds this x |bound - t|,
FAMILY_STALL = 0.01  # ... unless the bound is below the first-order one and the last pass lowered it by at most
FAMILY_FLOOR = 1e-6  # this x |bound - t|, or the Newton step times Ehat is at most this x the first-order bound
FAMILY_SHARE = 1e-3  # ... or at most this x the bound's margin below the first-order bound (t from the facets'
#                      Psi can lie above the bound, so the gap is taken in absolute value)
CARRY = True  # later passes start from the last pass's atoms (`_carried`; False: every pass cuts afresh)
CARRY_WIDTH = 2  # ... the edges under them and this many on either side
CARRY_ROUNDS = 1  # ... solved with at most this many cutting-plane rounds
QUICK_FIRST = True  # linf grid solves try `token_solve.QUICK` (no iterative refinement) before the ladder
REFINE_OPTIMAL_LINF = False  # refine linf grid solves that ended optimal as well (`_refines`; benchmarks compare)
BLOCK_FLOOR = 1e-4  # weight scale of a grid block at least this x 1 / (1 + |w| / typical) (`_block_scale`)


def _virtual_data(D, w: np.ndarray, scale: np.ndarray):
    """The token program at value offsets w (objective units) as relaxation data, with weight scale E_l = scale:
    token j's program is E_lj times this one at w = wt_j - t divided by its E_l (the rows do not depend on E_l or
    on t). The blocks are solved together, to one absolute accuracy, so `scale` decides where that accuracy goes
    (`_block_scale`)."""
    G = w.size
    eps = np.full(G, float(np.max(D.eps_s)))
    return replace(D, A=np.full(G, D.R_s) + eps + np.log(scale), w0=D.g0 + w * D.rho_o, eps_s=eps,
                   eps_w=np.zeros(G), tail=0.0)


def _bracket(gw: np.ndarray, w: np.ndarray):
    """(j, j1, al): the grid points around each w and the interpolation weight of j1 (0 on a grid point)."""
    j = np.clip(np.searchsorted(gw, w) - 1, 0, gw.size - 1)
    j1 = np.minimum(j + 1, gw.size - 1)
    span_w = np.where(j1 > j, gw[j1] - gw[j], 1.0)
    al = np.clip(np.where(j1 > j, (w - gw[j]) / span_w, 0.0), 0.0, 1.0)
    return j, j1, al


def _block_scale(gw: np.ndarray, wt: np.ndarray, El: np.ndarray, ts, typical: float) -> np.ndarray:
    """Weight scale of each grid block for the joint interior-point solve: the share of the tokens' weight
    sum_j El_j that its dual carries into the real program at the pass's multipliers (the largest over ts), relative
    to the largest share, and at least BLOCK_FLOOR / (1 + |w| / typical).

    Block g's dual enters the bound multiplied by its share, so with E_l,g proportional to it every block's error
    counts as in the monolithic program: a token that carries almost all the weight is solved to the joint solve's
    full accuracy, not to 1/G of it (with equal scales, a hundred blocks of value offsets in the thousands set the
    objective's magnitude, and the relative tolerance with it). The floor keeps blocks that no token reads at these
    t solvable (they serve the next root); relative to the tokens' weight-averaged offset `typical`, a block far out
    does not set the scale."""
    share = np.zeros(gw.size)
    for t in np.atleast_1d(ts):
        j, j1, al = _bracket(gw, wt - t)
        s_t = np.zeros(gw.size)
        np.add.at(s_t, j, El * (1.0 - al))
        np.add.at(s_t, j1, El * al)
        share = np.maximum(share, s_t)
    top = float(share.max())
    share = share / top if top > 0.0 else share
    return np.maximum(share, BLOCK_FLOOR / (1.0 + np.abs(gw) / typical))


def _vertex_edges(D, chain, w: np.ndarray, near: int, grid: int) -> np.ndarray:
    """(G, K) edge indices (plus 2: rows 0, 1 are the sigma bounds) around the vertex maximizing
    e^sigma (w rho_o + omega) for each w, and a global sigma grid."""
    E = np.exp(chain.sigma - chain.sigma.max())
    kv = np.argmax(E[None, :] * (w[:, None] * D.rho_o + chain.omega[None, :]), axis=1)
    return edge_window(kv, chain, near, grid)


def _unscaled(prog, z, El):
    """The duals of the token programs at E_l = 1 from those at scale El (block g's rows divided by El_g)."""
    z = np.array(z, dtype=np.float64, copy=True)
    G = El.size
    for name, (start, dim) in prog.families.items():
        if name == "norm":
            continue
        for c in range(dim):
            z[start + dim * np.arange(G) + c] /= El
    return z


def _unit_scale(prog, El):
    """The same token programs at E_l = 1: only the objective depends on E_l (each token's terms are proportional to
    it; tau = 1 is fixed, so its coefficient is a constant), the rows do not."""
    c = np.array(prog.c, dtype=np.float64, copy=True)
    G = El.size
    for v in range(prog.nv):
        c[1 + prog.nv * np.arange(G) + v] /= El
    return replace(prog, c=c)


def _solve_tokens(D, upper_cone, mono, geometry, norm, ladder, near, grid, rounds, log, carried=None):
    """Solve the (independent, tau = 1) token programs of D; returns (prog, [z, refined z] at E_l = 1 (None when
    no solve converged and the LPs from the last dual iterate failed too; the refined one only when its LP
    succeeds), per-token primal values at E_l = 1 (the last LP's point when there is one), their slopes
    1 + kappa lam).

    The interior-point solve runs at D's weight scales (`_block_scale`: its accuracy goes where the weight is); the
    outer-approximation LPs of `token_solve.refined_duals` run on the same programs at E_l = 1, every block at its
    own scale (the LP's absolute tolerances would otherwise lose the blocks of small weight). Of their duals the one
    whose bound on the weighted programs is smallest is kept."""
    k = weight_coefficients(D.A, np.full(D.A.size, D.R_s), D.eps_s, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, mono)
    if norm == "l2":
        prog = build_program(D, upper_cone, mono, ellipse=geometry, k=k, fix_tau=True)
        status, _, x, z, lg = solve_program(prog, ladder, iterate=True)
        log += lg
    else:
        chain, hs, hw, hb = geometry
        if carried is None:
            edges = _vertex_edges(D, chain, (D.w0 - D.g0) / D.rho_o, near, grid)
        else:  # the sigma bounds, the global grid and the carried edges in place of the vertex window
            base = edge_window(np.zeros(D.A.size, dtype=np.int64), chain, 0, grid)
            edges = _distinct(np.concatenate([base, np.clip(carried, -2, chain.d - 1) + 2], axis=1))
        quick = ((QUICK,) if QUICK_FIRST else ()) + tuple(ladder)
        for prog, _, status, _, x, z, lg in cutting_plane_rounds(D, upper_cone, mono, edges, (hs, hw, hb), chain,
                                                                 quick, rounds, k=k, fix_tau=True, iterate=True):
            log += lg
    if z is None:
        return prog, None, None, None, None
    z1 = _unscaled(prog, z, k["El"])
    refined = refined_solutions(_unit_scale(prog, k["El"]), z1) if _refines(norm, D, status) else []
    if x is None and not refined:  # no solve converged and the LPs from its last iterate failed
        return prog, None, None, None, None
    if refined:  # the LP's point is more accurate than an interior-point solve that ends optimal_inaccurate
        x = refined[-1][0]
        gens_v = unit_generators(D, norm)
        refined = [min((zz for _, zz in refined),
                       key=lambda zz: bound_from_dual(prog, _unscaled(prog, zz, 1.0 / k["El"]), gens_v, norm,
                                                      offer=False)[0])]
    lam, Uw, Vw = x[prog.var(LAM)], x[prog.var(UW)], x[prog.var(VW)]
    psi = k["wt"] * (1.0 + k["kappa"] * lam) + (k["c_V"] * Vw + k["c_U"] * Uw) / k["El"]
    atoms = atom_edges(prog, x, D, geometry[0]) if norm != "l2" and status == "optimal" else None
    return prog, [z1] + refined, psi, 1.0 + k["kappa"] * lam, atoms


def _refines(norm: str, D, status: str) -> bool:
    """Whether the outer-approximation LPs refine a grid solve that ended with `status`: where the interior-point
    dual is inexact (an attempt that did not end "optimal", or none converged: its last iterate), the deviation form
    of near-degenerate half-widths and the ellipse of l2 balls (`token_solve.refined_solutions`), or always with
    REFINE_OPTIMAL_LINF. Either way every dual is only a candidate, bounded by `support_bound`."""
    return REFINE_OPTIMAL_LINF or norm == "l2" or bool(D.deviation) or status != "optimal"


def _distinct(edges: np.ndarray) -> np.ndarray:
    """Each row's distinct entries, sorted, padded to the longest row with repeats of its first entry (a repeated
    facet row is the same half-plane: it changes no bound, only the size of the program)."""
    e = np.sort(edges, axis=1)
    new = np.concatenate([np.ones((e.shape[0], 1), dtype=bool), np.diff(e, axis=1) > 0], axis=1)
    width = int(new.sum(axis=1).max())
    order = np.argsort(~new, axis=1, kind="stable")  # each row's distinct entries first, in order
    out = np.take_along_axis(e, order, axis=1)[:, :width]
    return np.where(np.arange(width)[None, :] < new.sum(axis=1)[:, None], out, out[:, :1])


def _carried(gw: np.ndarray, previous, width: int) -> np.ndarray | None:
    """(G, 4 (2 width + 1)) edges for grid points gw from the last pass's (grid, atom edges): the edges under the
    atoms of the two grid points around each w, each with `width` neighbours on either side (None on the first
    pass, and for l2). Psi(w) is one program of w, so its atoms move with w: where the last pass's cutting planes
    ended is where this pass's start (its solve is a bound like any other whatever facets it is given)."""
    if previous is None or previous[1] is None:
        return None
    g_old, atoms = previous
    j, j1, _ = _bracket(g_old, gw)
    near = np.concatenate([atoms[j], atoms[j1]], axis=1)  # (G, 4)
    off = np.arange(-width, width + 1)
    out = np.where(near[:, :, None] >= 0, near[:, :, None] + off[None, None, :], -2)
    return out.reshape(gw.size, -1)


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
    while phi(lo) < 0 and hi - lo < 1e6:  # the root can lie below the first bracket too
        lo, hi = lo - 2.0 * (hi - lo) - 1.0, lo
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if phi(mid) > 0:
            lo = mid
        else:
            hi = mid
    return hi


def _interp(w: np.ndarray, grid_w: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y interpolated on the grid at w, linear beyond its ends (the end slopes)."""
    v = np.interp(w, grid_w, y)
    if grid_w.size > 1:
        v = np.where(w < grid_w[0], y[0] + (w - grid_w[0]) * (y[1] - y[0]) / (grid_w[1] - grid_w[0]), v)
        v = np.where(w > grid_w[-1], y[-1] + (w - grid_w[-1]) * (y[-1] - y[-2]) / (grid_w[-1] - grid_w[-2]), v)
    return v


def _newton(El, wt, t, grid_w, psi, dpsi) -> float:
    """One Newton step on F(t) = sum_j El_j Psi(wt_j - t) from the grid's own t (where the heavy tokens sit on grid
    points, so F(t) is their solved values), with Psi' = 1 + kappa lam at the solved points (envelope theorem)."""
    w = wt - t
    F = float(El @ _interp(w, grid_w, psi))
    dF = float(El @ np.maximum(np.interp(w, grid_w, dpsi), 1.0))
    return t + F / dF if dF > 0 and math.isfinite(F) else t


def _grid(wt: np.ndarray, weight: np.ndarray, ts, span: tuple) -> np.ndarray:
    """Grid points: the w = wt_j - t of the FAMILY_TOP heaviest tokens for each t in ts, and FAMILY_SPREAD points
    spread over the range of w."""
    heavy = wt[np.argsort(-weight)[:FAMILY_TOP]]
    top = np.concatenate([heavy - t for t in np.atleast_1d(ts)])
    g = np.unique(np.concatenate([top, np.linspace(span[0], span[1], FAMILY_SPREAD)]))
    keep = np.concatenate([[True], np.diff(g) > 1e-9 * max(1.0, float(np.abs(g).max()))])
    return g[keep]


def _spread(real, prog_v, z_v, El, j, j1, al, t) -> np.ndarray:
    """The dual of the real program: token i gets El_i times the interpolation (1 - al_i) z_v[j_i] + al_i z_v[j1_i]
    of the grid programs' duals, the normalization row the multiplier t."""
    n = El.size
    z = np.zeros(real.b.size)
    z[real.families["norm"][0]] = t
    for name, (start, dim) in real.families.items():
        if name == "norm":
            continue
        sv, dv = prog_v.families[name]
        for c in range(dim):
            z[start + dim * np.arange(n) + c] = El * ((1.0 - al) * z_v[sv + dv * j + c] + al * z_v[sv + dv * j1 + c])
    return z


def family_bound(D, upper_cone, mono, geometry, gens, norm, ladder, near, grid, rounds, ceiling=math.inf):
    """Bound from duals of the one-parameter family of token programs (see the module docstring). ceiling: the
    first-order bound in objective units (passes stop early only once the bound is below it).

    Returns (bound in objective units, status, the multiplier t, log [(solver, status, seconds)])."""
    n = D.A.size
    k = weight_coefficients(D.A, np.full(n, D.R_s), D.eps_s, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, mono)
    El, wt = k["El"], k["wt"]
    log = []
    t = 0.0
    span = (float(wt.min()) - 1.5, float(wt.max()) + 0.5)
    real = build_program(D, upper_cone, mono, k=k)
    i0 = real.families["norm"][0]
    band = float(np.max(k["Ehat"]))
    typical = max(1.0, float((El @ np.abs(wt)) / El.sum()))

    def candidate(t_at, gw, prog_v, z_v):
        """The bound from the grid's duals at multiplier t_at (tokens on a grid point take its dual, the others
        the interpolation of their two neighbours'), also with the best normalization multiplier."""
        j, j1, al = _bracket(gw, wt - t_at)
        out = math.inf
        for zv in z_v:
            z = _spread(real, prog_v, zv, El, j, j1, al, t_at)
            out = min(out, bound_from_dual(real, z, gens, norm)[0])
            z[i0] = best_multiplier(real, z, gens, norm, t_at)
            out = min(out, bound_from_dual(real, z, gens, norm)[0])
        return out

    bound = math.inf
    left = right = None  # (t, F, grid, psi, dpsi) of the solved t nearest the root on each side (F > 0: left)
    ts = [0.0]
    last = offered = None  # the last pass's solve; (t, solve) of the last candidate computed
    previous = None  # (grid, atom edges) of the last pass (linf): the facets the next pass starts from
    before = math.inf
    for p in range(FAMILY_PASSES):
        gw = _grid(wt, El * k["Ehat"], ts, span)
        scale = _block_scale(gw, wt, El, ts, typical)
        carried = _carried(gw, previous, CARRY_WIDTH) if CARRY else None
        prog_v, z_v, psi, dpsi, atoms = _solve_tokens(_virtual_data(D, gw, scale), upper_cone, mono, geometry,
                                                      norm, ladder, near, grid,
                                                      rounds if carried is None else min(rounds, CARRY_ROUNDS),
                                                      log, carried)
        if z_v is None:
            break
        last = (gw, prog_v, z_v)
        previous = (gw, atoms)
        for t_p in ts:
            F = float(El @ _interp(wt - t_p, gw, psi))
            if F > 0 and (left is None or t_p > left[0]):
                left = (t_p, F, gw, psi, dpsi)
            elif F <= 0 and (right is None or t_p < right[0]):
                right = (t_p, F, gw, psi, dpsi)
            if p > 0:
                bound = min(bound, candidate(t_p, gw, prog_v, z_v))
                offered = (t_p, last)
        if p == 0:
            t = _root(El, wt, gw, psi, -1.0, 2.0)
            ts = [t]
            continue
        # F is convex and decreasing: a Newton step from the left stays left of the root, the chord between the two
        # sides lands right of it; both are solved in the next pass (the bound is best at or just right of the root)
        step = abs(_newton(El, wt, t, gw, psi, dpsi) - t)
        resolution = abs(bound - t)
        settled = bound < ceiling and (before - bound <= FAMILY_STALL * resolution
                                       or step * band <= FAMILY_FLOOR * abs(ceiling)
                                       or step * band <= FAMILY_SHARE * (ceiling - bound))
        before = bound
        if not math.isfinite(bound) or (step * band > FAMILY_GAIN * resolution and not settled):
            ts = []
            if left is not None:
                ts.append(_newton(El, wt, left[0], *left[2:]))
            if right is not None and left is not None:
                (tl, Fl), (tr, Fr) = left[:2], right[:2]
                chord = tl + Fl * (tr - tl) / (Fl - Fr)
                ts.append(min(chord, 0.5 * (ts[0] + tr)))  # the chord stalls where F is flat right of the root
            elif right is not None:
                ts.append(_newton(El, wt, right[0], *right[2:]))
            t = ts[-1]
        else:
            break
    if last is None:
        return math.inf, "solver_error", math.nan, log
    if offered is None or offered[0] != t or offered[1] is not last:
        bound = min(bound, candidate(t, *last))  # the last root, tokens interpolated on the last grid
    return bound, log[-1][1], t, log


