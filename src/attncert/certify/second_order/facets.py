"""Facets of the zonotope P (linf) for the relaxation, chosen by cutting planes.

Only omega enters the objective, with positive weights, so only the *upper* boundary of P (d edges) and
the two sigma-bounds matter. Each token gets SLOTS half-plane slots filled with a subset of the exact upper
facets -- any subset is an outer polygon of P, hence a sound relaxation -- chosen by cutting planes. Initial
facets (`initial_edges`), in this order of priority until all but 2 + SLOTS // 8 slots are filled: the `near`
consecutive edges on each side of the vertex of the token's estimated optimum (vertex Dinkelbach), the edges
at GRID_POINTS sigma values over [-R_s, R_s], the edges at LOCAL_POINTS sigma values around the vertex (the
global grid before the local one: at r = 0.02 a local window can hold more edges than the cap leaves, and
without the global grid the far parts of P stay open: the tight certificate's median gap on the default run
is 1.7x larger, docs/history/paper_cost_ratio.md). After each
solve, the edges under every point U_j / lam_j, V_j / (tau - lam_j) lying above the exact boundary are added
(at most MAX_ROUNDS solves). Every round's bound is sound; the smallest is kept.

The fixed query uses near = NEAR_EDGES: its relaxation's points sit within a few edges of the estimated vertex
(GPT-2-shaped heads, d = 768: within +-8 edges at r <= 0.01), where the edges are short and a sigma grid skips
most of them. With the two grids alone (near = 1) every solve adds one or two edges per token, three rounds are
usual, and the bound still ends ~1e-4 of the gap above the value with every edge; with the consecutive edges one
solve reaches that value on ~97% of units. The varying query uses near = 1: its query token's estimate ignores
the query's effect on every score (its points can lie 100+ edges away), and on the factored program nearly
parallel consecutive facets make Clarabel stall on a few units (SCS then takes seconds)
(docs/history/paper_cost_ratio.md).
"""
from __future__ import annotations

import math

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.compiled import assign
from attncert.certify.second_order.dual_certificate import solve_and_certify
from attncert.head.projected_ball import Zonotope2D
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

MAX_ROUNDS = 3  # cutting-plane solves (linf)
SLOTS = 48  # facet slots per token (linf)
NEAR_EDGES = 12  # fixed query: consecutive edges on each side of the estimated optimum's vertex (initial facets)
GRID_POINTS = 9  # global sigma grid of initial facets
LOCAL_POINTS = 25  # fine grid around each token's estimated optimum ...
WINDOW = 0.3  # ... of half-width WINDOW * R_s
VIOLATION_TOL = 1e-9  # points higher than this (units of the value scale) above the boundary get a cut
CUT_STOP = 1e-5  # stop when the mass-weighted violation is below CUT_STOP x the (scaled) objective


class UpperChainFacets:
    """Supporting half-planes n.x <= b of P along its upper boundary, plus the two sigma-bounds.

    Edge k of the upper boundary (`projected_ball.Zonotope2D`) has outward normal (-domega_k, dsigma_k);
    b = h_P(n) = r sum_i |n . (u_s[i], u_w[i])| is evaluated directly (rounded up), so every selected
    half-plane contains the exact image of the ball whatever the rounding of the vertex list.
    """

    def __init__(self, u_s: np.ndarray, u_w: np.ndarray, radius: float, R_s: float, chain: Zonotope2D | None = None):
        """R_s >= r ||u_s||_1, the largest |sigma| over P (rounded up by the caller); chain: Zonotope2D(u_s, u_w,
        radius) when the caller has it already."""
        self.chain = Zonotope2D(u_s, u_w, radius) if chain is None else chain
        self.gens = np.stack([u_s, u_w], axis=0)  # (2, d)
        self.radius = radius
        self.R_s = R_s
        self.d = u_s.shape[0]

    def edge_at(self, sigma: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.chain.sigma, sigma, side="right") - 1
        return np.clip(k, 0, self.d - 1)

    def omega_max(self, sigma: np.ndarray) -> np.ndarray:
        return np.interp(sigma, self.chain.sigma, self.chain.omega)

    def halfplanes(self, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(H, b) for the given edge indices, with the sigma-bounds (+-1, 0) <= R_s prepended."""
        edges = np.unique(np.asarray(edges, dtype=np.int64))
        N = np.stack([-self.chain.domega[edges], self.chain.dsigma[edges]], axis=1)
        nrm = np.hypot(N[:, 0], N[:, 1])
        keep = nrm > 0
        N = N[keep] / nrm[keep, None]
        b = self.radius * np.abs(N @ self.gens).sum(axis=1)
        b = b * (1.0 + gamma(self.d + 6)) + 1e-300
        H = np.concatenate([np.array([[1.0, 0.0], [-1.0, 0.0]]), N])
        b = np.concatenate([[self.R_s, self.R_s], b])
        return H, b


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


def initial_edges(chains: list, k: np.ndarray, slots: int = SLOTS, near: int = 1) -> list:
    """Per token (k_j: the vertex of its estimated optimum), at most slots - 2 - slots // 8 edges (the rest of the
    slots: the two sigma-bounds and room for the cutting planes): the `near` consecutive edges on each side of
    vertex k_j, then the edges at a global sigma grid, then the edges at a fine sigma grid around the vertex (first
    come, first kept). near = 1: the two edges at the vertex and both grids (<= 36 edges; the varying query's rule)."""
    out = []
    for j, ch in enumerate(chains):
        R = ch.R_s
        close = np.arange(max(k[j] - near, 0), min(k[j] + near, ch.d))  # edge e joins vertices e, e + 1
        s_j = ch.chain.sigma[k[j]]
        loc = ch.edge_at(np.clip(np.linspace(s_j - WINDOW * R, s_j + WINDOW * R, LOCAL_POINTS), -R, R))
        glob = ch.edge_at(np.linspace(-R, R, GRID_POINTS))
        cand = np.concatenate([close, glob, loc])
        _, first = np.unique(cand, return_index=True)
        out.append(np.sort(cand[np.sort(first)[:max(slots - 2 - slots // 8, 1)]]))
    return out


def unit_rows(H: np.ndarray, b: np.ndarray, scale_s: float, scale_w: float) -> tuple[np.ndarray, np.ndarray]:
    """Half-planes H x <= b of P rewritten in unit coordinates xhat = (sigma / scale_s, omega / scale_w).

    Row k becomes (H_k diag(scale)) xhat <= b_k, normalized to unit length. The computed row errs by a few
    ulps per entry; since |xhat| <= 1 per coordinate on P, adding 8u (|Hs| + |Hw|) to the right-hand side
    (and rounding it up) keeps every point of P inside the computed half-plane.
    """
    Hu = H * np.array([scale_s, scale_w])[None, :]
    nrm = np.hypot(Hu[:, 0], Hu[:, 1])
    nrm = np.where(nrm > 0, nrm, 1.0)
    Hu = Hu / nrm[:, None]
    bu = b / nrm * (1.0 + 4.0 * UNIT_ROUNDOFF) + 8.0 * UNIT_ROUNDOFF * np.abs(Hu).sum(axis=1) + 1e-300
    return Hu, bu


def fill_facets(P: dict, chains: list, edges: list, K: int, scales: np.ndarray):
    """Write the selected half-planes of every token into its K slots (padding rows: 0 <= b lam).

    scales: (n, 2) unit of the score and value coordinate of each token.
    """
    n = len(chains)
    Hs, Hw, bb = np.zeros(n * K), np.zeros(n * K), np.ones(n * K)
    for j, ch in enumerate(chains):
        H, b = unit_rows(*ch.halfplanes(edges[j]), scales[j, 0], scales[j, 1])
        m = min(H.shape[0], K)
        Hs[j * K:j * K + m], Hw[j * K:j * K + m] = H[:m, 0], H[:m, 1]
        bb[j * K:j * K + m] = b[:m]
    assign(P["Hs"], Hs)
    assign(P["Hw"], Hw)
    assign(P["b"], bb)


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
                        scales: np.ndarray, to_g, ladder, base_of=None, cut_stop: float = CUT_STOP):
    """Solve, certify, add cuts, repeat (linf). Every round's certified bound is sound; keep the best.

    The points read off a solution are U_j / lam_j and V_j / (base_j - lam_j), base = tau (or
    `base_of(values)`, the factored varying program's per-token bases); the cuts stop once the violated edges
    weigh <= cut_stop x the primal.

    Returns (best value in g units, its status, its solver, last primal in g units, rounds, facets, log,
    dual gap of the best bound in g units).
    """
    log, best, best_status, best_solver, primal, converged, rounds = [], math.inf, "not_run", "none", math.nan, False, 0
    best_gap, first_ok = math.nan, ladder[0]
    for rounds in range(1, MAX_ROUNDS + 1):
        fill_facets(P, chains, edges, K, scales)
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
        if excess <= cut_stop * max(cert.primal, 1e-300):
            break
        if not grow_edges(edges, new, K):
            break
    n_facets = int(max(e.size for e in edges)) + 2
    return best, best_status, best_solver, primal, rounds, n_facets, log, best_gap
