"""The cutting-plane loop of the linf relaxations: solve, certify, add the violated facets of P, repeat.

Facets and their slots: `facets`. Every round's certified bound is sound; the smallest is kept (at most
MAX_ROUNDS solves). `vertex_dinkelbach` estimates each token's optimal vertex to place the first facets.
"""
from __future__ import annotations

import math

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.dual_bound.solve_ladder import solve_and_certify
from attncert.certify.second_order.dual_bound.dual_record import note_construction
from attncert.certify.second_order.relaxation.facets import fill_facets

MAX_ROUNDS = 3  # cutting-plane solves (linf)
VIOLATION_TOL = 1e-9  # points higher than this (units of the value scale) above the boundary get a cut
CUT_STOP = 1e-5  # stop when the mass-weighted violation is below CUT_STOP x the (scaled) objective


def vertex_dinkelbach(A: np.ndarray, w0: np.ndarray, g0: float, sig: np.ndarray, om: np.ndarray,
                      iters: int = 8) -> tuple[float, np.ndarray]:
    """Estimate of the fixed-query worst case restricted to vertices of the upper boundaries.

    sig, om: (n, d+1) vertex coordinates of each token's boundary. Returns (t, k), k_j the best vertex of
    token j at t (Dinkelbach's iteration). Only used to place facets: a feasible value, not a bound.
    """
    E = np.exp(A[:, None] + sig - sig.max())
    t = g0
    rows = np.arange(A.size)
    k = np.argmax(E * (w0[:, None] - t + om), axis=1)
    for _ in range(iters):
        k = np.argmax(E * (w0[:, None] - t + om), axis=1)
        e = E[rows, k]
        t_new = float(e @ (w0 + om[rows, k]) / e.sum())
        if not t_new > t:
            break
        t = t_new
    return t, k


def cuts(masses: tuple, U: np.ndarray, V: np.ndarray, chains: list, scales: np.ndarray, weights: tuple):
    """Per token: the edges under its points U/lam' and V/(tau-lam) lying above the exact boundary.

    masses = (lam', tau - lam) per token (lam' the column-scaled upper mass, U = the matching scaled
    moment, so U/lam' is the position); U, V: (n, >= 2) unit moments (first two coordinates: sigma, omega);
    weights = objective coefficients of U_omega and V_omega. Also returns the mass-weighted total height of
    those points above the boundary in objective units: what more cuts can still remove.
    """
    n = len(chains)
    new = [np.zeros(0, dtype=np.int64) for _ in range(n)]
    total = 0.0
    scale_ref = np.max(np.abs(np.concatenate([np.asarray(masses[0]), np.asarray(masses[1])])))
    for Y, mass, weight in ((U, masses[0], weights[0]), (V, masses[1], weights[1])):
        for j in range(n):
            if not mass[j] > 1e-12 * scale_ref:
                continue
            ch = chains[j]
            x = np.asarray(Y[j, :2]) / mass[j] * scales[j]
            sig = float(np.clip(x[0], -ch.R_s, ch.R_s))
            h = x[1] - float(ch.omega_max(np.array([sig]))[0])
            if h > VIOLATION_TOL * scales[j, 1]:
                new[j] = np.union1d(new[j], ch.edge_at(np.array([sig])))
                total += weight[j] * mass[j] * h / scales[j, 1]
    return new, total


def grow_edges(edges: list, new: list, slots: int) -> bool:
    """Add each token's newly violated edges to its facet set, up to `slots` - 2 edges (the two end
    facets take the rest); in place. Returns whether any set grew (else the cutting planes stop)."""
    grew = False
    for j in range(len(edges)):
        add = np.setdiff1d(new[j], edges[j])
        room = slots - 2 - edges[j].size
        if add.size and room > 0:
            edges[j] = np.union1d(edges[j], add[:room])
            grew = True
    return grew


def cutting_plane_solve(prob: cp.Problem, P: dict, V: dict, box: dict, chains: list, edges: list, K: int,
                        scales: np.ndarray, to_g, ladder, base_of=None, cut_stop: float = CUT_STOP, more_cuts=None):
    """Solve, certify, add cuts, repeat (linf). Every round's certified bound is sound; keep the best.

    The points read off a solution are U_j / lam_j and V_j / (base_j - lam_j), base = tau (or
    `base_of(values)`, the factored varying program's per-token bases); the cuts stop once the violated edges
    weigh <= cut_stop x the primal. more_cuts: other cuts of the program with the same loop (the factored varying
    program's support cuts): `fill()` sets their parameters before each solve, `grow(values, primal, stop)` adds
    the solved point's cuts and says whether any was added (a round follows if so).

    Returns (best value in g units, its status, its solver, last primal in g units, rounds, facets, log,
    dual gap of the best bound in g units).
    """
    log, best, best_status, best_solver, primal, converged, rounds = [], math.inf, "not_run", "none", math.nan, False, 0
    best_gap, first_ok = math.nan, ladder[0]
    for rounds in range(1, MAX_ROUNDS + 1):
        fill_facets(P, chains, edges, K, scales)
        note_construction(edges=[np.array(e) for e in edges])
        if more_cuts is not None:
            more_cuts.fill()
        # later rounds: the interior-point rungs, the one that converged first in front (no slow SCS)
        rung = ladder if not converged else [first_ok] + [a for a in ladder if a[0] == "CLARABEL" and a is not first_ok]
        cert = solve_and_certify(prob, box, ladder=rung, loose_retries=None if not converged else 0)
        log += [(sv, st, to_g(bd), sec) for (sv, st, bd, sec) in cert.log]
        val = to_g(cert.bound)
        if val < best and (cert.converged or converged):  # a failed later round may still improve it
            best, best_status, best_solver = val, cert.status, cert.solver
            best_gap = val - to_g(cert.primal) if math.isfinite(cert.primal) else math.nan
        if not cert.converged:
            break
        if not converged:
            first_ok = next((a for a in ladder if a[0] == "CLARABEL"), ladder[0])
            for a, entry in zip(ladder, cert.log):  # the attempt whose solve was kept
                if entry[0] == cert.solver == "CLARABEL" and entry[2] == cert.bound:
                    first_ok = a
        converged = True
        primal = to_g(cert.primal)
        vals = {k: cert.values[v.id] for k, v in V.items()}
        base = float(vals["tau"]) if base_of is None else base_of(vals)
        lam = np.asarray(vals["lam"])
        new, excess = cuts((lam, base - lam), np.asarray(vals["U"]), np.asarray(vals["V"]), chains, scales,
                           (np.asarray(P["c_U"].value), np.asarray(P["c_V"].value)))
        stop = cut_stop * max(cert.primal, 1e-300)
        more = more_cuts is not None and more_cuts.grow(vals, cert.primal, stop)
        if not ((excess > stop and grow_edges(edges, new, K)) or more):
            break
    n_facets = int(max(e.size for e in edges)) + 2
    return best, best_status, best_solver, primal, rounds, n_facets, log, best_gap
