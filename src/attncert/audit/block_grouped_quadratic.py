"""The quadratic part of a value through a head's query-key products, bounded as one form: the audit's numpy
implementation of `block/grouped_quadratic.py` (whose docstring states the mathematics).

With Rbar_h the first column of head h's products p_e = q_e k_e and Delta_e the others' differences, the part is at
most rho^2 |Rbar_h| sum_ab |B_h,ab| (+ B_h's rounding) + sum_e |Delta_e| max |Q_pe|, B_h = sum_{e in h} j_qe j_ke^T;
the smaller of this and the node-by-node bound is used.
"""
from __future__ import annotations

import numpy as np

from attncert.audit.block_curves import U, inflate
from attncert.head.rounding import gamma


class BilinearGroup:
    def __init__(self, enc, product_node: int, heads: int, width: int):
        self.node, self.H, self.w = product_node, heads, width
        nd = enc.nodes[product_node]
        self.cols = nd.cols
        x, y = nd.inputs
        box = []
        for h in range(heads):
            rows = slice(h * width, (h + 1) * width)
            B = x.J[rows].T @ y.J[rows]
            box.append(inflate(inflate(np.abs(B).sum()) + gamma(width + 2) * (x.s[rows] * y.s[rows]).sum()))
        self.box = np.array(box)

    def bound(self, Rv: np.ndarray, Q: np.ndarray, r2: np.ndarray) -> np.ndarray:
        """(B, rows) bound on |sum_e R_{v p_e} Q_{p_e}| (Q (B, N) the nodes' max |Q|, r2 (B, 1) >= rho^2)."""
        lo, hi = self.cols
        cols = Rv[:, lo:hi].reshape(-1, self.H, self.w)
        Rbar = cols[:, :, :1]
        dev = (np.abs(cols - Rbar) * (1 + 2 * U)).reshape(-1, self.H * self.w)
        return inflate(r2 * inflate(np.abs(Rbar[:, :, 0]) @ self.box)[None, :] + Q[:, lo:hi] @ dev.T)


def score_groups(enc) -> list:
    """The enclosure's registered query-key groups (`block_rederive.block_output` registers them)."""
    return [BilinearGroup(enc, *g) for g in enc.bilinear_groups]
