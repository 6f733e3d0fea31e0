"""The token program's solve: Clarabel on the conic data of `token_program`, its polished and refined duals, the
cutting-plane rounds that choose each token's facets of P.

Every dual returned here is only a candidate: the bound comes from `support_bound.bound_from_dual` (any dual
vector, repaired into K^*, outward rounded).
"""
from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.dual_bound.solve_ladder import _CLARABEL_BASE, _CLARABEL_STATUS
from attncert.certify.second_order.dual_bound.weak_duality import POLISH_SECONDS, _cone_slices, polish_dual, repair_dual
from attncert.certify.second_order.fixed_query.token_program import (LAM, US, UW, VS, VW, Program,
                                                                     build_program)

# Clarabel at 1e-8: the bound is computed from the dual with the exact P whatever the solver's accuracy; on the
# long-context units 1e-8 gave the same bounds as 1e-10 (to 4 digits of the gap) in half the time or less.
_BASE = dict(_CLARABEL_BASE, tol_gap_abs=1e-8, tol_gap_rel=1e-8, tol_feas=1e-8)
LADDER = (dict(_BASE, max_step_fraction=0.9),
          dict(_BASE, max_step_fraction=0.75),
          dict(_BASE, max_step_fraction=0.6, equilibrate_enable=False))
# a rung without Clarabel's iterative refinement of the KKT solves (40% less time per iteration), tried first by the
# token family's linf grid solves (`token_family._solve_tokens`); an attempt that does not end "optimal" is refined
# by the outer-approximation LPs there, one that does not converge goes on to LADDER's rungs
QUICK = dict(_BASE, max_step_fraction=0.9, iterative_refinement_enable=False)
NEAR = 4  # consecutive edges on each side of the estimated vertex (linf)
GRID = 7  # global sigma grid of edges (linf)
ROUNDS = 3  # solves with cutting planes (linf)
MAX_EDGES = 40  # edges per token at most
CUT_STOP = 1e-8  # stop cutting once the violated mass weighs <= this x (1 + |primal|)
VIOLATION = 1e-9  # an atom this far above the boundary of P (unit value coordinate) gets a cut
RING = 16  # tangent cuts of each 3-dimensional second-order cone given to the first LP of `refined_duals`
REFINE_STALL = 1e-9  # ... stopping once a round raised the LP's optimum by at most this x (1 + |optimum|)
REFINE = 3  # rounds of tangent cuts of the outer-approximation LP after the polishing LP (`refined_duals`)


def polished_dual(prog: Program, z: np.ndarray) -> np.ndarray | None:
    """A second dual from the solver's: `weak_duality.polish_dual` (each cone block replaced by its supporting
    cut at the repaired dual, the LP over the box of `Program.box` solved by HiGHS) on the program's own rows. An
    interior-point dual that is slightly off pays its stationarity residual to first order in the bound; the LP's
    multipliers pass within second order of the optimum (the cuts are tangent at the solver's point). It is one
    more point of K^* whose bound is computed and compared like any other; None when the LP fails."""
    lo, hi = prog.box()
    mag = np.maximum(np.abs(lo), np.abs(hi))
    row_cost = abs(prog.A) @ mag + np.abs(prog.b) + 1e-300
    with np.errstate(all="ignore"):
        zr = repair_dual(z, prog.dims, row_cost)
        return polish_dual(prog.c, prog.A, prog.b, prog.dims, zr, lo, hi)


def _cone_cuts(kind: str, S: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """For slacks S (one cone per row), the rows that violate their cone and the normals y in K^* of the supporting
    half-spaces y^T s' >= 0 that cut them off: (mask over the rows, Y (rows of the mask, dim)).

    Exponential cone {(x, y, z): y e^{x/y} <= z}: with r = x/y, the gradient of the convex, 1-homogeneous
    y e^{x/y} - z at s is (e^r, e^r (1 - r), -1), so y = (-e^r, -e^r (1 - r), 1) (on the boundary of K^*: the cut
    is tangent at the cone point with the same ratio r). Second-order cone {(t, v): ||v|| <= t}: y = (1, -v/||v||).
    A row within tol (relative) of its cone, or whose cut is undefined (y <= 0, e^r overflows, v = 0), gets none."""
    with np.errstate(all="ignore"):
        if kind == "exp":
            r = S[:, 0] / S[:, 1]
            er = np.exp(r)
            excess = S[:, 1] * er - S[:, 2]
            mask = (S[:, 1] > 0.0) & (r < 700.0) & (excess > tol * (np.abs(S[:, 1]) * er + np.abs(S[:, 2])))
            er, r = er[mask], r[mask]
            return mask, np.stack([-er, -er * (1.0 - r), np.ones_like(er)], axis=1)
        nv = np.linalg.norm(S[:, 1:], axis=1)
        mask = (nv > 0.0) & (nv - S[:, 0] > tol * (nv + np.abs(S[:, 0])))
        return mask, np.concatenate([np.ones((int(mask.sum()), 1)), -S[mask, 1:] / nv[mask, None]], axis=1)


def refined_duals(prog: Program, z: np.ndarray, iters: int = REFINE, ring: int = RING, tol: float = 1e-12) -> list:
    """The duals of `refined_solutions` (see there), in order."""
    return [zz for _, zz in refined_solutions(prog, z, iters, ring, tol)]


def refined_solutions(prog: Program, z: np.ndarray, iters: int = REFINE, ring: int = RING,
                      tol: float = 1e-12, stall: float = REFINE_STALL) -> list:
    """Duals of an outer approximation of the program by supporting cuts, refined from the solver's dual z.

    Start as `polished_dual` (one cut per cone block, at the repaired z) and solve the LP

        minimize c^T x   s.t.  zero-cone rows,  nonnegative rows,  every cut y_i^T (b_k - A_k x) >= 0,  x in the box

    (HiGHS). Then, `iters` times: at the LP's point x, every cone block k whose slack b_k - A_k x lies outside its
    cone gets the cut tangent there (`_cone_cuts`), and the LP is solved again, until no block is violated or the LP's
    optimum rose by at most `stall` x (1 + |optimum|) in the last round. Each LP is a relaxation of the conic
    program over the box, so its dual (equality and row multipliers, and per block sum_i mu_i y_i with mu_i >= 0, a
    point of K^*_k: K^* is a convex cone) is a dual of the program, bounded like any other (`support_bound`). The
    cuts approach each cone where the optimum sits: the interior-point dual is accurate to its tolerance relative to
    the row scale, the LP's to simplex accuracy, which decides near-degenerate half-widths (the curvature of the
    exponential cones is then ~h^2 of their scale) and the ellipse of l2 balls. Second-order cones of dimension 3
    (the ellipse of l2 balls, the deviation form) also get `ring` tangent cuts around the circle in the first LP.
    Returns the LPs' (point, dual) in order (empty when the first LP fails); the first dual is `polished_dual`'s up
    to those ring cuts."""
    from scipy.optimize import linprog

    lo, hi = prog.box()
    mag = np.maximum(np.abs(lo), np.abs(hi))
    with np.errstate(all="ignore"):
        zr = repair_dual(z, prog.dims, abs(prog.A) @ mag + np.abs(prog.b) + 1e-300)
    A, b, c = sp.csr_matrix(prog.A), prog.b, prog.c
    slices, m = _cone_slices(prog.dims)
    eq = np.concatenate([np.arange(a, e) for k, a, e in slices if k == "zero"] + [np.zeros(0, dtype=np.int64)])
    ub = np.concatenate([np.arange(a, e) for k, a, e in slices if k == "nonneg"] + [np.zeros(0, dtype=np.int64)])
    groups = {}  # (kind, dim) -> first rows of its cones
    for kind, a, e in slices:
        if kind in ("soc", "exp"):
            groups.setdefault((kind, e - a), []).append(a)
    groups = {key: np.asarray(v, dtype=np.int64) for key, v in groups.items()}
    batches = []  # (rows (k, dim): the rows of each cut's cone, Y (k, dim): its normal)

    for (kind, dim), first in groups.items():
        rows = first[:, None] + np.arange(dim)[None, :]
        Y = zr[rows]
        keep = np.any(Y != 0.0, axis=1)
        batches.append((rows[keep], Y[keep]))
        if kind == "soc" and dim == 3 and ring > 0:
            theta = 2.0 * np.pi * np.arange(ring) / ring
            circle = np.stack([np.ones(ring), -np.cos(theta), -np.sin(theta)], axis=1)
            batches.append((np.repeat(rows, ring, axis=0), np.tile(circle, (first.size, 1))))
    A_eq, b_eq = (A[eq], b[eq]) if eq.size else (None, None)
    out, previous = [], math.nan  # the last LP optimum (read from the second round on)
    for it in range(iters + 1):
        ncut = sum(r.shape[0] for r, _ in batches)
        if ncut:
            cut_id, start = [], 0
            for r, _ in batches:
                cut_id.append(np.repeat(np.arange(start, start + r.shape[0]), r.shape[1]))
                start += r.shape[0]
            Ycut = sp.csr_matrix((np.concatenate([Y.ravel() for _, Y in batches]),
                                  (np.concatenate(cut_id), np.concatenate([r.ravel() for r, _ in batches]))),
                                 shape=(ncut, m))
            A_ub, b_ub = sp.vstack([A[ub], Ycut @ A], format="csr"), np.concatenate([b[ub], Ycut @ b])
        else:
            A_ub, b_ub = A[ub], b[ub]
        try:
            with np.errstate(all="ignore"):
                res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=np.stack([lo, hi], axis=1),
                              method="highs", options=dict(time_limit=POLISH_SECONDS))
        except (ValueError, np.linalg.LinAlgError):
            break
        if res.status != 0 or res.ineqlin is None or res.x is None:
            break
        zn = np.zeros(m)
        if eq.size:
            zn[eq] = -np.asarray(res.eqlin.marginals)
        mu = -np.asarray(res.ineqlin.marginals)
        zn[ub] = mu[:ub.size]
        mu_cut, start = np.maximum(mu[ub.size:], 0.0), 0
        for r, Y in batches:
            np.add.at(zn, r.ravel(), (mu_cut[start:start + r.shape[0], None] * Y).ravel())
            start += r.shape[0]
        out.append((np.asarray(res.x, dtype=np.float64), zn))
        if it == iters or (it > 0 and res.fun - previous <= stall * (1.0 + abs(res.fun))):
            break
        previous = res.fun
        s = b - A @ res.x
        new = 0
        for (kind, dim), first in groups.items():
            rows = first[:, None] + np.arange(dim)[None, :]
            mask, Y = _cone_cuts(kind, s[rows], tol)
            if mask.any():
                batches.append((rows[mask], Y))
                new += int(mask.sum())
        if not new:
            break
    return out


def edge_window(kv: np.ndarray, chain, near: int, grid: int) -> np.ndarray:
    """(m, K) facet rows per token: the `near` consecutive edges on each side of vertex kv_j of the upper chain
    and a global sigma grid of `grid` edges, plus 2 (rows 0, 1 are the sigma bounds, always included)."""
    off = np.arange(-near, near)
    close = np.clip(kv[:, None] + off[None, :], 0, chain.d - 1)
    gsig = np.linspace(-chain.R_s, chain.R_s, grid + 2)[1:-1]
    glob = np.clip(np.searchsorted(chain.sigma, gsig, side="right") - 1, 0, chain.d - 1)
    e = np.concatenate([close, np.broadcast_to(glob, (kv.size, glob.size))], axis=1) + 2
    bounds = np.broadcast_to(np.array([0, 1], dtype=np.int64), (kv.size, 2))
    return np.concatenate([bounds, e], axis=1)


def _clarabel(prog: Program, opts: dict, stop=None):
    import clarabel

    cones = []
    if prog.dims.zero:
        cones.append(clarabel.ZeroConeT(prog.dims.zero))
    if prog.dims.nonneg:
        cones.append(clarabel.NonnegativeConeT(prog.dims.nonneg))
    cones += [clarabel.SecondOrderConeT(q) for q in prog.dims.soc]
    cones += [clarabel.ExponentialConeT()] * prog.dims.exp
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    for key, val in opts.items():
        setattr(settings, key, val)
    P = sp.csc_matrix((prog.c.size, prog.c.size))
    solver = clarabel.DefaultSolver(P, prog.c, prog.A, prog.b, cones, settings)
    if stop is not None:
        solver.set_termination_callback(stop)
    return solver.solve()


def solve_once(prog, opts: dict, stop=None):
    """One Clarabel solve of `prog` (c, A, b, dims) with the settings `opts`: (status, converged, raw result, log
    entry (solver, status, seconds)); a solver crash is a failed attempt with raw None. stop: Clarabel's
    termination callback (called with its info after every iteration; True ends the solve at that iterate)."""
    t0 = time.perf_counter()
    try:
        raw = _clarabel(prog, opts, stop)
    except Exception as exc:  # noqa: BLE001 - a solver crash is one failed attempt
        return "solver_error", False, None, ("CLARABEL", f"solver_error: {type(exc).__name__}: {exc}",
                                             time.perf_counter() - t0)
    status, ok = _CLARABEL_STATUS.get(str(raw.status), ("solver_error", False))
    return status, ok, raw, ("CLARABEL", status, time.perf_counter() - t0)


def solve_program(prog: Program, ladder=LADDER, iterate: bool = False):
    """Clarabel rungs until one converges. Returns (status, primal objective, x, z) of the converged attempt
    (x, z None when none converged) and the log [(solver, status, seconds)].

    iterate: when no rung converged, z is the last finite dual iterate of the last rung that returned one (x stays
    None): a dual bounded like any other (`support_bound` is sound for any z), and the start of the
    outer-approximation LPs of `refined_solutions`, which need no converged solve."""
    log, last = [], None
    for opts in ladder:
        status, ok, raw, entry = solve_once(prog, opts)
        log.append(entry)
        if raw is None:
            continue
        if ok:
            x, z = np.asarray(raw.x, dtype=np.float64), np.asarray(raw.z, dtype=np.float64)
            return status, -float(raw.obj_val), x, z, log
        zi = np.asarray(raw.z, dtype=np.float64)
        if iterate and zi.size == prog.b.size and np.all(np.isfinite(zi)):
            last = zi
    return (log[-1][1] if log else "not_run"), math.nan, None, last, log


def _atoms(prog: Program, x: np.ndarray, D, chain):
    """Per atom U/lam and V/(tau - lam) of each token: (weight, mass, sigma in chain units, unit omega, defined)."""
    tau = x[0]
    lam = x[prog.var(LAM)]
    out = []
    for mass, s_col, w_col, weight in ((lam, US, UW, np.abs(prog.c[prog.var(UW)])),
                                       (tau - lam, VS, VW, np.abs(prog.c[prog.var(VW)]))):
        ok = mass > 1e-12 * max(tau, 1e-300)
        sig = np.where(ok, x[prog.var(s_col)] / np.where(ok, mass, 1.0), 0.0) * D.R_s
        om = np.where(ok, x[prog.var(w_col)] / np.where(ok, mass, 1.0), 0.0)
        out.append((weight, mass, np.clip(sig, -chain.R_s, chain.R_s), om, ok))
    return out


def cuts(prog: Program, x: np.ndarray, D, chain, edges: np.ndarray) -> tuple[np.ndarray, float]:
    """Edges under the atoms U/lam, V/(tau - lam) that lie above the boundary of P; and their weighted height."""
    new_cols, total = [], 0.0
    for weight, mass, sig, om, ok in _atoms(prog, x, D, chain):
        height = om - np.interp(sig, chain.sigma, chain.omega) / D.rho_w
        above = ok & (height > VIOLATION)
        e = np.clip(np.searchsorted(chain.sigma, sig, side="right") - 1, 0, chain.d - 1)
        new_cols.append(np.where(above, e, edges[:, 0]))
        total += float(np.sum(np.where(above, weight * mass * height, 0.0)))
    return np.stack(new_cols, axis=1), total


def atom_edges(prog: Program, x: np.ndarray, D, chain) -> np.ndarray:
    """(n, 2): the edge of the upper chain under each token's atoms U/lam and V/(tau - lam) at the solution x
    (-2 where an atom's mass is ~0: the sigma bound row once the caller adds 2), above P or not: where the
    cutting planes ended, the facets a solve at nearby value offsets needs (`token_family`)."""
    cols = []
    for _, _, sig, _, ok in _atoms(prog, x, D, chain):
        e = np.clip(np.searchsorted(chain.sigma, sig, side="right") - 1, 0, chain.d - 1)
        cols.append(np.where(ok, e, -2))
    return np.stack(cols, axis=1)


def cutting_plane_rounds(D, upper_cone: bool, mono: int, edges: np.ndarray, facets: tuple, chain, ladder=LADDER,
                         rounds: int = ROUNDS, k: dict | None = None, fix_tau: bool = False, iterate: bool = False):
    """Solve, add the edges under the atoms that lie above P, solve again (at most `rounds` solves, linf).

    facets: (hs, hw, hb) of every edge (`separable.linf_rows`). Yields, per solve, (prog, facet rows per token,
    status, primal, x, z, log); x and z are None when no attempt converged (then it stops; iterate: z is then the
    last dual iterate, `solve_program`)."""
    hs, hw, hb = facets
    for rnd in range(1, rounds + 1):
        prog = build_program(D, upper_cone, mono, edges, hs, hw, hb, k=k, fix_tau=fix_tau)
        status, primal, x, z, log = solve_program(prog, ladder, iterate)
        yield prog, edges.shape[1], status, primal, x, z, log
        if x is None:
            return
        new, excess = cuts(prog, x, D, chain, edges - 2)
        if excess <= CUT_STOP * (1.0 + abs(primal)) or rnd == rounds or edges.shape[1] + 2 > MAX_EDGES:
            return
        edges = np.concatenate([edges, new + 2], axis=1)
