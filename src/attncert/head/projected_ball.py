"""The 2-D image of the perturbation ball seen by a fixed query.

With the query fixed, a token perturbation delta in R^d enters the head only through two numbers,

    sigma = u_s . delta        (score shift)          omega = u_w . delta     (value-read shift),

with u_s, u_w the same for every token (`fixed_query.fixed_query_reduction`). The set of reachable
pairs is the image of the ball B_r = {delta : ||delta|| <= r} under the 2 x d map A = [u_s; u_w]:

    P = { (u_s . delta, u_w . delta) : ||delta|| <= r }.

For the objective e^sigma (b + omega) only the *upper boundary* of P matters (for fixed sigma a larger
omega is always better, since e^sigma > 0):

    omega_max(sigma) = max { omega : (sigma, omega) in P },  sigma in [-R_s, R_s],  R_s = r ||u_s||_*.

* linf (box): P = sum_i r [-1, 1] (u_s[i], u_w[i]) is a zonotope. Orient every generator to point
  right, g_i = r e_i (u_s[i], u_w[i]) with e_i = sign(u_s[i]) (sign(u_w[i]) for a vertical one). The
  upper boundary starts at delta = -r e and flips the generators one by one, in order of decreasing
  angle atan2(g_i,omega, g_i,sigma): a concave polyline with d + 1 vertices. The order only depends
  on (u_s, u_w), so it is computed once per unit and shared by all tokens.
* l2 (ball): P = r R^T B_2 is an ellipse, where [u_s, u_w] = Q R (Gram-Schmidt of the two columns),
  R = [[r11, r12], [0, r22]], r11, r22 >= 0. With
  delta = r Q (cos t, sin t) the upper boundary is t in [0, pi]:
        sigma(t) = a cos t,   omega(t) = p cos t + q sin t,   (a, p, q) = r (r11, r12, r22).

Both classes map boundary parameters back to explicit perturbations delta, so every value found on P
can be recomputed from a feasible token.

Rounding. The directions come from `fixed_query.fixed_query_reduction` (extended precision, rounded
once, with elementwise error bounds; arithmetic in `rounding`). `geometry_error` bounds, per coordinate, how far the
computed boundary is from the
exact image of the ball under the float64 directions: generator products and the angle sort
(near-parallel generators may be swapped; each swap moves the polyline by <= 4u |g|) cost
8u r (||u_s||_1 + ||u_w||_1); the long-double cumulative sums and the final rounding of the vertices
cost 2 gamma^L_{d+2} r ||u||_1 + u |vertex|; all doubled, since a segment's far end (vertex k plus
its float generator) and the evaluated vertex k+1 are each that close to the exact vertex. For the ellipse R comes from
a long-double Gram-Schmidt
of the two columns: |Delta R| <= 8 gamma^L_{3d+10} (||u_s|| + ||u_w||) + u |R|, and the image of the
ball under R^T moves by at most r |Delta R| per coordinate (plus 4u r ||u|| for the float64 products
a = r r11 etc. and for np.pi < pi).
"""
from __future__ import annotations

import numpy as np

from attncert.head.rounding import LD, UNIT_ROUNDOFF, gamma_ld


class Zonotope2D:
    """Upper boundary of P = {(u_s.delta, u_w.delta) : ||delta||_inf <= r} as a concave polyline.

    Vertex k (k = 0..d) has coordinates (sigma[k], omega[k]); edge k joins vertex k to k + 1 and moves
    by (dsigma[k], domega[k]) while generator order[k] flips from -e to +e.
    """

    norm = "linf"

    def __init__(self, u_s: np.ndarray, u_w: np.ndarray, radius: float):
        u_s = np.asarray(u_s, dtype=np.float64)
        u_w = np.asarray(u_w, dtype=np.float64)
        self.radius = float(radius)
        self.d = u_s.shape[0]
        e = np.sign(u_s)
        vertical = e == 0
        e[vertical] = np.where(u_w[vertical] < 0, -1.0, 1.0)
        self.e = e
        gs = self.radius * np.abs(u_s)  # rightward sigma component of each generator (half edge)
        gw = self.radius * u_w * e
        # decreasing angle = decreasing slope; vertical generators (angle pi/2 or -pi/2) sit at the ends
        self.order = np.argsort(-np.arctan2(gw, gs), kind="stable")
        self.rank = np.empty(self.d, dtype=np.int64)
        self.rank[self.order] = np.arange(self.d)
        self.dsigma = 2.0 * gs[self.order]
        self.domega = 2.0 * gw[self.order]
        self.R_s = float(gs.sum())
        self.R_w = float(self.radius * np.abs(u_w).sum())
        gsL, gwL = gs.astype(LD), gw.astype(LD)
        sigma = np.concatenate(([-gsL.sum()], -gsL.sum() + np.cumsum(2 * gsL[self.order])))
        omega = np.concatenate(([-gwL.sum()], -gwL.sum() + np.cumsum(2 * gwL[self.order])))
        self.sigma = sigma.astype(np.float64)
        self.omega = omega.astype(np.float64)
        l1 = self.radius * np.array([np.abs(u_s).sum(), np.abs(u_w).sum()])
        vertex_err = (8 * UNIT_ROUNDOFF * l1.sum() + 2 * gamma_ld(self.d + 2) * 2 * l1
                      + UNIT_ROUNDOFF * np.array([np.abs(self.sigma).max(), np.abs(self.omega).max()]))
        # x2: the end of segment k (vertex k + its float generator) and vertex k+1 are both this close
        # to the exact vertex, and only vertex k+1 is evaluated
        self.geometry_error = 2.0 * vertex_err

    @property
    def n_edges(self) -> int:
        return self.d

    def perturbations(self, edge: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """delta (m, d) for points on edge `edge[m]` at fraction `lam[m]` in [0, 1] (lam=0: vertex edge)."""
        edge = np.asarray(edge)[:, None]
        lam = np.asarray(lam, dtype=np.float64)[:, None]
        rank = self.rank[None, :]
        coef = np.where(rank < edge, 1.0, np.where(rank == edge, 2.0 * lam - 1.0, -1.0))
        return self.radius * self.e[None, :] * coef


class Ellipse2D:
    """Upper boundary of P = {(u_s.delta, u_w.delta) : ||delta||_2 <= r}, parametrized by t in [0, pi].

    sigma(t) = a cos t, omega(t) = p cos t + q sin t, realised by delta(t) = r Q (cos t, sin t)
    (Q's second column is 0 when u_w is parallel to u_s: the boundary is then a segment).
    """

    norm = "l2"

    def __init__(self, u_s: np.ndarray, u_w: np.ndarray, radius: float):
        u_s = np.asarray(u_s, dtype=np.float64)
        u_w = np.asarray(u_w, dtype=np.float64)
        self.radius = float(radius)
        self.d = u_s.shape[0]
        sL, wL = u_s.astype(LD), u_w.astype(LD)
        r11 = np.sqrt(sL @ sL)
        e1 = sL / r11 if r11 > 0 else (wL / np.sqrt(wL @ wL) if np.any(wL) else np.zeros(self.d, LD))
        r12 = e1 @ wL
        v = wL - r12 * e1
        c = e1 @ v  # second Gram-Schmidt pass: keeps e2 orthogonal to e1 even when u_w ~ u_s
        r12, v = r12 + c, v - c * e1
        r22 = np.sqrt(v @ v)
        e2 = v / r22 if r22 > 0 else np.zeros(self.d, LD)  # collinear: the upper boundary is a segment
        self.Q = np.stack([e1, e2], axis=1).astype(np.float64)
        self.a = self.radius * float(r11)
        self.p = self.radius * float(r12)
        self.q = self.radius * float(r22)
        self.R_s = float(self.radius * np.linalg.norm(u_s))
        self.R_w = float(self.radius * np.linalg.norm(u_w))
        nrm = float(np.linalg.norm(u_s) + np.linalg.norm(u_w))
        self.geometry_error = np.full(2, self.radius * nrm * (8 * UNIT_ROUNDOFF + 16 * gamma_ld(3 * self.d + 10)))

    def perturbations(self, theta: np.ndarray) -> np.ndarray:
        """delta (m, d) = r Q (cos t, sin t) for boundary angles theta (m,)."""
        theta = np.asarray(theta, dtype=np.float64)
        return self.radius * (np.cos(theta)[:, None] * self.Q[None, :, 0] + np.sin(theta)[:, None] * self.Q[None, :, 1])


def projected_ball(u_s: np.ndarray, u_w: np.ndarray, radius: float, norm: str):
    """The 2-D image of the radius-r ball of `norm` under delta -> (u_s.delta, u_w.delta)."""
    if norm == "linf":
        return Zonotope2D(u_s, u_w, radius)
    if norm == "l2":
        return Ellipse2D(u_s, u_w, radius)
    raise ValueError(f"unknown norm {norm!r}")
