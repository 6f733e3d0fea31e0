"""Facets of the zonotope P (linf) for the relaxation (the cutting-plane loop that chooses them: `cutting_planes`).

Only omega enters the objective, with positive weights, so only the *upper* boundary of P (d edges) and
the two sigma-bounds matter. Each token gets SLOTS half-plane slots filled with a subset of the exact upper
facets -- any subset is an outer polygon of P, hence a sound relaxation -- chosen by cutting planes. Initial
facets (`initial_edges`), in this order of priority until all but 2 + SLOTS // 8 slots are filled: the `near`
consecutive edges on each side of the vertex of the token's estimated optimum (vertex Dinkelbach), the edges
at GRID_POINTS sigma values over [-R_s, R_s], the edges at LOCAL_POINTS sigma values around the vertex (the
global grid before the local one: at r = 0.02 a local window can hold more edges than the cap leaves, and
without the global grid the far parts of P stay open: the tight certificate's median gap on the default run
is 1.7x larger, CHANGELOG.md, "Measurements moved from the reference docs"). After each
solve, the edges under every point U_j / lam_j, V_j / (tau - lam_j) lying above the exact boundary are added
(at most MAX_ROUNDS solves). Every round's bound is sound; the smallest is kept.

The fixed query uses near = NEAR_EDGES: its relaxation's points sit within a few edges of the estimated vertex
(GPT-2-shaped heads, d = 768: within +-8 edges at r <= 0.01), where the edges are short and a sigma grid skips
most of them. With the two grids alone (near = 1) every solve adds one or two edges per token, three rounds are
usual, and the bound still ends ~1e-4 of the gap above the value with every edge; with the consecutive edges one
solve reaches that value on ~97% of units. The varying query uses near = 1: its query token's estimate ignores
the query's effect on every score (its points can lie 100+ edges away), and on the factored program nearly
parallel consecutive facets make Clarabel stall on a few units (SCS then takes seconds)
(docs/certificate.md section 4; CHANGELOG.md, "Measurements moved from the reference docs").
"""
from __future__ import annotations

import numpy as np

from attncert.certify.second_order.dual_bound.compiled import assign
from attncert.head.projected_ball import Zonotope2D
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

SLOTS = 48  # facet slots per token (linf)
NEAR_EDGES = 12  # fixed query: consecutive edges on each side of the estimated optimum's vertex (initial facets)
GRID_POINTS = 9  # global sigma grid of initial facets
LOCAL_POINTS = 25  # fine grid around each token's estimated optimum ...
WINDOW = 0.3  # ... of half-width WINDOW * R_s


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
