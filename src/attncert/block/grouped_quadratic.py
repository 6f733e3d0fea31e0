"""The quadratic part of a value through a softmax, or through a head's query-key products, bounded as one group.

In the Taylor model (block/taylor_model.py) the quadratic part of a value v is h_v(delta) = sum_k R_vk Q_k(delta),
Q_k the centre quadratic piece of node k, and `quadratic_part` bounds it node by node, sum_k |R_vk| max |Q_k|. Two
groups of nodes have pieces that cancel in the sum; each is bounded here as one form, and the smaller of the two
bounds is used (both are sound).

**Softmax of head h**: exps E_j = exp(t_j), 1/D with D = sum_j E_j, weights a_j = E_j (1/D). With tau_j = j_tj . delta
(j_tj the float Jacobian row of t_j, |tau_j| <= rho sigma_j, sigma_j = ||j_tj||_1), e_l = exp'(t_l) and
e_D = (1/x)'(D) the graph's floats that formed the Jacobians downstream,

    Q_{E_j} = 1/2 phi_E''(t_j) tau_j^2,   Q_{1/D} = 1/2 phi''(D) (sum_l e_l tau_l)^2 + err,
    Q_{a_j} = (e_j tau_j) (e_D sum_l e_l tau_l) + err,

so that sum_k R_vk Q_k = tau^T M_v tau + err with the symmetric n x n matrix

    M_v = diag(1/2 R_{vE} phi_E'') + 1/2 R_{vD} phi''(D) e e^T + 1/2 e_D (w e^T + e w^T),   w = R_{va} * e,

and |tau^T M_v tau| <= rho^2 sum_jk |M_jk| sigma_j sigma_k. The err terms are the float rows' rounding
(E's rows e_j j_tj one rounding, D's a sum of n, 1/D's one more: gamma_{n+3} relative) and phi'''s evaluation
(FN_ULPS u): with |.| on every term of M_v (the matrix A_v), |err| + the rounding of M_v's entries is at most
(4 gamma_{n+16} + 4 FN_ULPS u) rho^2 sum_jk A_jk sigma_j sigma_k.

**Query-key products of head h**: p_e = q_e k_e (e in the head) enter the value only through the head's score, so
their columns of R are nearly equal; with Rbar_h the first and Delta_e = R_{v p_e} - Rbar_h,

    sum_{e in h} R_{v p_e} Q_{p_e} = Rbar_h delta^T B_h delta + sum_e Delta_e Q_{p_e},
    B_h = sum_{e in h} j_{q e} j_{k e}^T,

|delta^T B_h delta| <= rho^2 sum_ab |B_h,ab| (B_h formed once, its rounding gamma_{d_h} sum_e ||j_qe||_1 ||j_ke||_1
added) and the second sum node by node.
"""
from __future__ import annotations

import torch

from attncert.block.enclosure import FN_ULPS, U, Graph, inflate
from attncert.block.map import EXP, RECIPROCAL
from attncert.head.rounding import gamma


class SoftmaxGroup:
    """One softmax op of the graph (all its heads): the exp, 1/D and weight ops and the float pieces of M_v."""

    def __init__(self, G: Graph, exp_op, reciprocal_op, weights_op, heads: int, keys: int):
        self.ops = (exp_op, reciprocal_op, weights_op)
        self.H, self.n = heads, keys
        t = G.vars[exp_op.inputs[0]]
        D = G.vars[reciprocal_op.inputs[0]]
        self.e = EXP.d1(t.c).reshape(heads, keys)                         # (H, n)
        self.d2e = EXP.d2(t.c).reshape(heads, keys)
        self.d2D, self.eD = RECIPROCAL.d2(D.c), RECIPROCAL.d1(D.c)         # (H,)
        self.sigma = t.s.reshape(heads, keys)                               # >= ||j_tj||_1
        self.err = 4.0 * gamma(keys + 16) + 4.0 * FN_ULPS * U

    def bound(self, Rv: torch.Tensor) -> torch.Tensor:
        """(rows,) with rho^2 times it bounding |sum_{k in the group} R_vk Q_k| (module docstring)."""
        (E, D, A), H, n = self.ops, self.H, self.n
        RE = Rv[:, E.cols[0]:E.cols[1]].reshape(-1, H, n)
        RD = Rv[:, D.cols[0]:D.cols[1]]
        w = Rv[:, A.cols[0]:A.cols[1]].reshape(-1, H, n) * self.e
        ee = self.e.unsqueeze(-1) * self.e.unsqueeze(-2)                  # (H, n, n)
        cross = (0.5 * self.eD).view(1, H, 1, 1) * w.unsqueeze(-1) * self.e.unsqueeze(-2)
        M = (torch.diag_embed(0.5 * RE * self.d2e) + (0.5 * RD * self.d2D).view(-1, H, 1, 1) * ee
             + cross + cross.transpose(-1, -2))
        across = cross.abs()
        A_abs = (torch.diag_embed((0.5 * RE * self.d2e).abs()) + (0.5 * RD * self.d2D).abs().view(-1, H, 1, 1)
                 * ee.abs() + across + across.transpose(-1, -2))
        ss = self.sigma.unsqueeze(-1) * self.sigma.unsqueeze(-2)          # (H, n, n)
        main = torch.einsum("vhjk,hjk->v", M.abs(), ss)
        slack = torch.einsum("vhjk,hjk->v", A_abs, ss)
        return inflate(inflate(main) + inflate(self.err * slack))


class BilinearGroup:
    """One query-key product op: per head h the box bound of delta^T B_h delta over ||delta||_inf <= 1."""

    def __init__(self, G: Graph, product_op, heads: int, width: int):
        self.op, self.H, self.w = product_op, heads, width
        x, y = (G.vars[i] for i in product_op.inputs)
        bh = []
        for h in range(heads):
            rows = slice(h * width, (h + 1) * width)
            B = x.J[rows].T @ y.J[rows]
            bh.append(inflate(inflate(B.abs().sum()) + gamma(width + 2) * (x.s[rows] * y.s[rows]).sum()))
        self.box = torch.stack(bh)                                          # (H,)

    def bound(self, Rv: torch.Tensor, Q: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
        """(B, rows) bound on |sum_{e} R_{v p_e} Q_{p_e}|; Q (B, N) the product nodes' bounds max |Q_{p_e}|,
        r2 (B,) >= rho^2."""
        lo, hi = self.op.cols
        cols = Rv[:, lo:hi].reshape(-1, self.H, self.w)
        Rbar = cols[:, :, :1]
        dev = ((cols - Rbar).abs() * (1 + 2 * U)).reshape(-1, self.H * self.w)
        return inflate(r2.unsqueeze(1) * inflate(Rbar[:, :, 0].abs() @ self.box).unsqueeze(0) + Q[:, lo:hi] @ dev.T)


def score_groups(G: Graph) -> tuple[list, list]:
    """The graph's registered softmax and query-key groups (block/certificate.py's `block_graph` registers them)."""
    op_of = {op.out: op for op in G.ops}
    soft = [SoftmaxGroup(G, op_of[e], op_of[r], op_of[a], H, n) for e, r, a, H, n in G.softmax_groups]
    bil = [BilinearGroup(G, op_of[p], H, w) for p, H, w in G.bilinear_groups]
    return soft, bil

