"""The quadratic part of a value through a softmax, or through a head's query-key products, bounded as one group: the
audit's numpy implementation of `block/grouped_quadratic.py` (whose docstring states the mathematics).

Softmax of head h (exps E_j = exp(t_j), 1/D, weights a_j = E_j (1/D)): with tau_j = j_tj . delta, e = exp'(t),
e_D = (1/x)'(D) the enclosure's floats,

    sum_{k in the group} R_vk Q_k = tau^T M_v tau + err,
    M_v = diag(1/2 R_vE phi_E'') + 1/2 R_vD phi''(D) e e^T + 1/2 e_D (w e^T + e w^T),   w = R_va * e,

bounded by rho^2 [sum_jk |M_jk| sigma_j sigma_k + (4 gamma_{n+16} + 4 FN_ULPS u) sum_jk A_jk sigma_j sigma_k] (A: M
with |.| on every term, sigma_j >= ||j_tj||_1). Query-key products of head h: with Rbar_h the first column of the head
and Delta_e the others' differences, rho^2 |Rbar_h| sum_ab |B_h,ab| (+ B_h's rounding) + sum_e |Delta_e| max |Q_pe|,
B_h = sum_{e in h} j_qe j_ke^T. The smaller of each group's bound and its node-by-node bound is used.
"""
from __future__ import annotations

import numpy as np

from attncert.audit.block_curves import CURVES, FN_ULPS, U, inflate
from attncert.head.rounding import gamma


class SoftmaxGroup:
    def __init__(self, enc, exp_node: int, reciprocal_node: int, weights_node: int, heads: int, keys: int):
        self.nodes = (exp_node, reciprocal_node, weights_node)
        self.H, self.n = heads, keys
        E, D = enc.nodes[exp_node], enc.nodes[reciprocal_node]
        self.cols = tuple(enc.nodes[i].cols for i in self.nodes)
        t, Dv = E.inputs[0], D.inputs[0]
        self.e = CURVES["exp"][1](t.c).reshape(heads, keys)
        self.d2e = CURVES["exp"][2](t.c).reshape(heads, keys)
        self.d2D, self.eD = CURVES["reciprocal"][2](Dv.c), CURVES["reciprocal"][1](Dv.c)
        self.sigma = t.s.reshape(heads, keys)
        self.err = 4.0 * gamma(keys + 16) + 4.0 * FN_ULPS * U

    def bound(self, Rv: np.ndarray) -> np.ndarray:
        """(rows,) with rho^2 times it bounding |sum_{k in the group} R_vk Q_k|."""
        (E, D, A), H, n = self.cols, self.H, self.n
        RE = Rv[:, E[0]:E[1]].reshape(-1, H, n)
        RD = Rv[:, D[0]:D[1]]
        w = Rv[:, A[0]:A[1]].reshape(-1, H, n) * self.e
        ee = self.e[:, :, None] * self.e[:, None, :]
        cross = (0.5 * self.eD)[None, :, None, None] * w[..., None] * self.e[None, :, None, :]
        diag = 0.5 * RE * self.d2e
        rank1 = (0.5 * RD * self.d2D)[:, :, None, None]
        eye = np.eye(n)
        M = diag[..., None] * eye + rank1 * ee + cross + np.swapaxes(cross, -1, -2)
        across = np.abs(cross)
        A_abs = np.abs(diag)[..., None] * eye + np.abs(rank1) * np.abs(ee) + across + np.swapaxes(across, -1, -2)
        ss = self.sigma[:, :, None] * self.sigma[:, None, :]
        main = np.einsum("vhjk,hjk->v", np.abs(M), ss)
        slack = np.einsum("vhjk,hjk->v", A_abs, ss)
        return inflate(inflate(main) + inflate(self.err * slack))


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


def score_groups(enc) -> tuple[list, list]:
    """The enclosure's registered softmax and query-key groups (`block_rederive.block_output` registers them)."""
    soft = [SoftmaxGroup(enc, *g) for g in enc.softmax_groups]
    bil = [BilinearGroup(enc, *g) for g in enc.bilinear_groups]
    return soft, bil
