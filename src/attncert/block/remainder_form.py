"""The block certificate's remainder as a positive semidefinite form in u plus a scalar, so that its maximum over the
box is taken jointly (one SDP dual) instead of node by node.

For ||xi||_inf <= rho and ||u||_inf <= 1 the Hessian's variation is a sum over the scalar nonlinear nodes
(block/certificate.py). Unary node n with input z, p = j.u, q = (j(xi) - j).u (|q| <= a, |p| <= s = ||j||_1),
|A(xi) - A0| <= dA, A0 = lambda0 phi''(c):

    u^T (A(xi) j(xi) j(xi)^T - A0 j j^T) u = (A(xi) - A0)(p + q)^2 + A0 (2 p q + q^2)
        <= [dA (1 + eta) + |A0| eta] p^2 + (dA + |A0|)(a^2 + a s / kappa),      eta = kappa a / s,

by (p + q)^2 <= (1 + eta) p^2 + (1 + 1/eta) q^2 and 2 |p q| <= eta p^2 + q^2 / eta. Product node x y (adjoint
lambda0 +- Lam), P_x = p_x + q_x:

    2 [Lam |P_x||P_y| + |lambda0| (|q_x||p_y| + |p_x||q_y| + |q_x||q_y|)]
        <= [Lam t (1 + eta_x) + |lambda0| eta_2] p_x^2 + [Lam / t (1 + eta_y) + |lambda0| eta_1] p_y^2
           + Lam [t (a_x^2 + a_x s_x / kappa) + (a_y^2 + a_y s_y / kappa) / t]
           + |lambda0| (a_x s_y / kappa + a_y s_x / kappa + 2 a_x a_y),

with t = (s_y + a_y) / (s_x + a_x), eta_x = kappa a_x / s_x, eta_1 = kappa a_x / s_y, eta_2 = kappa a_y / s_x (a
ratio with a zero denominator is 0: that p is 0). At p = s every inequality is an equality, so the diagonal-
dominance dual of the form, y_i = sum_n c_n |j_n,i| s_n, gives back the node-by-node bound; the SDP dual is never
worse and usually several times smaller, because the maxima of (j_n . u)^2 over the box are not attained at one u.

Integrated over t in [0, 1] (pieces k, weights w_k) the remainder is at most

    max_u u^T Pbar u + sum_k w_k rest_k,     Pbar = sum_k w_k sum_n c_n(t_{k+1} r) j_n j_n^T,

and u^T Pbar u is bounded by the SDP dual of 2 Pbar (box_upper) plus the rounding of the float Pbar
(gamma_{N + 16} sum_n cbar_n s_n^2).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attncert.block.enclosure import FN_ULPS, U, Graph, inflate, range_bounds
from attncert.head.rounding import gamma

KAPPA = 3.0     # eta = KAPPA a / s: how much of the Jacobian's variation goes into the joint form (any > 0 is sound;
                # 3 is best on the default run's transitions 1-4; where the form gains nothing (its transition 0),
                # the node-by-node bound, taken as well, is the smaller)


@dataclass
class RemainderForm:
    Pbar: torch.Tensor          # (R, m, d, d) float, finite entries (rows with a non-finite coefficient: zeros)
    rest: torch.Tensor          # (R, K, m) the scalar part on each piece (not yet weighted)
    rounding: torch.Tensor      # (R, m) bound on max_u |u^T (Pbar - Pbar_exact) u|
    dominance: torch.Tensor     # (R, m, d) the diagonal-dominance dual of 2 Pbar
    finite: torch.Tensor        # (R, m) bool: every coefficient finite
    node_by_node: torch.Tensor  # (R, K, m) the bound with every (j_n . u)^2 at its own maximum (never below the
                                # form's at kappa = 1; the certificate takes the smaller of the two)


def _ratio(num, den):
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.zeros_like(num))


def node_terms(G: Graph, lam0: dict, Lam: dict, kappa: float = KAPPA):
    """Per nonlinear op: a list of (coefficient (B, m, N), direction rows J (N, d)), the scalar rest (B, m) and the
    node-by-node bound of the op's terms (B, m): each (j_n . u)^2 at its own maximum s_n^2."""
    for op in G.ops:
        if op.kind == "linear":
            continue
        l0, L = lam0[op.out].abs().unsqueeze(0), Lam[op.out]
        if op.kind == "unary":
            z = G.vars[op.inputs[0]]
            w = G.width(z)
            _, M3 = range_bounds(op.curve, z.c, w, z.floor)
            d2 = op.curve.d2(z.c).abs() * (1 + FN_ULPS * U)
            s, a = z.s.unsqueeze(0), z.a
            dA = L * (d2 + M3 * w).unsqueeze(1) + l0 * (M3 * w).unsqueeze(1)
            A0 = l0 * d2
            eta = _ratio(kappa * a, s.expand_as(a)).unsqueeze(1)
            coef = dA * (1 + eta) + A0 * eta
            rest = (dA + A0) * (a * a + a * s / kappa).unsqueeze(1)
            sa = (s + a).unsqueeze(1)
            node = dA * sa * sa + A0 * (2 * s * a + a * a).unsqueeze(1)
            yield [(coef, z.J)], rest.sum(-1), node.sum(-1)
        else:
            x, y = (G.vars[i] for i in op.inputs)
            sx, sy, ax, ay = x.s.unsqueeze(0), y.s.unsqueeze(0), x.a, y.a
            tx, ty = sx + ax, sy + ay
            t = torch.where((tx > 0) & (ty > 0), ty / tx.clamp_min(1e-300), torch.ones_like(tx)).unsqueeze(1)
            ex, ey = _ratio(kappa * ax, sx.expand_as(ax)), _ratio(kappa * ay, sy.expand_as(ay))
            e1, e2 = _ratio(kappa * ax, sy.expand_as(ax)), _ratio(kappa * ay, sx.expand_as(ay))
            cx = L * t * (1 + ex).unsqueeze(1) + l0 * e2.unsqueeze(1)
            cy = L / t * (1 + ey).unsqueeze(1) + l0 * e1.unsqueeze(1)
            rest = (L * (t * (ax * ax + ax * sx / kappa).unsqueeze(1) + (ay * ay + ay * sy / kappa).unsqueeze(1) / t)
                    + l0 * (ax * sy / kappa + ay * sx / kappa + 2 * ax * ay).unsqueeze(1))
            node = 2.0 * (L * (tx * ty).unsqueeze(1) + l0 * (ax * sy + sx * ay + ax * ay).unsqueeze(1))
            yield [(cx, x.J), (cy, y.J)], rest.sum(-1), node.sum(-1)


def remainder_form(G: Graph, lam0: dict, Lam: dict, weights: torch.Tensor, R: int, K: int,
                   kappa: float = KAPPA) -> RemainderForm:
    """Pbar per radius and the scalar rest per piece, over the graph's radii rho = [0, r_1 t_1, ..., r_R t_K]."""
    m = next(iter(lam0.values())).shape[0]
    d = G.d
    Wk = weights.view(1, K, 1, 1)
    Pbar = torch.zeros(R, m, d, d, dtype=weights.dtype)
    dominance = torch.zeros(R, m, d, dtype=weights.dtype)
    absum = torch.zeros(R, m, dtype=weights.dtype)
    rest = torch.zeros(R, K, m, dtype=weights.dtype)
    finite = torch.ones(R, m, dtype=torch.bool)
    node_by_node = torch.zeros(R, K, m, dtype=weights.dtype)
    count = 0
    for pairs, r, node in node_terms(G, lam0, Lam, kappa):
        rest = rest + inflate(r[1:].reshape(R, K, m))
        node_by_node = node_by_node + inflate(node[1:].reshape(R, K, m))
        for coef, J in pairs:
            cbar = inflate((coef[1:].reshape(R, K, m, -1) * Wk).sum(1))                  # (R, m, N)
            ok = torch.isfinite(cbar).all(-1)
            finite &= ok
            cbar = torch.where(ok.unsqueeze(-1), cbar, torch.zeros_like(cbar))
            s = J.abs().sum(-1)
            Pbar += torch.matmul((cbar.unsqueeze(-1) * J).transpose(-1, -2), J)
            dominance += 2.0 * (cbar * s) @ J.abs()
            absum += (cbar * s * s).sum(-1)
            count += J.shape[0]
    rest = torch.nan_to_num(inflate(rest), nan=float("inf"))
    node_by_node = torch.nan_to_num(inflate(node_by_node), nan=float("inf"))
    Pbar = 0.5 * (Pbar + Pbar.transpose(-1, -2))
    return RemainderForm(Pbar, rest, inflate(gamma(count + 16) * absum), inflate(dominance * (1 + gamma(count + 4))),
                         finite, node_by_node)
