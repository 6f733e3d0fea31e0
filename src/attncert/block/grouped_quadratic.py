"""The quadratic part of a value through a head's query-key products, bounded as one form.

In the Taylor model (block/taylor_model.py) the quadratic part of a value v is h_v(delta) = sum_k R_vk Q_k(delta),
Q_k the centre quadratic piece of node k, and `quadratic_part` bounds it node by node. The query-key products
p_e = q_e k_e (e in head h) enter the value only through the head's score, so their columns of R are nearly equal;
with Rbar_h the first and Delta_e = R_{v p_e} - Rbar_h,

    sum_{e in h} R_{v p_e} Q_{p_e} = Rbar_h delta^T B_h delta + sum_e Delta_e Q_{p_e},
    B_h = sum_{e in h} j_{q e} j_{k e}^T,

|delta^T B_h delta| <= rho^2 sum_ab |B_h,ab| (B_h formed once, its rounding gamma_{d_h} sum_e ||j_qe||_1 ||j_ke||_1
added) and the second sum node by node. The smaller of this and the node-by-node bound is used (both are sound).
"""
from __future__ import annotations

import torch

from attncert.block.enclosure import U, Graph, inflate
from attncert.head.rounding import gamma


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


def score_groups(G: Graph) -> list:
    """The graph's registered query-key groups (block/certificate.py's `block_graph` registers them)."""
    op_of = {op.out: op for op in G.ops}
    return [BilinearGroup(G, op_of[p], H, w) for p, H, w in G.bilinear_groups]

