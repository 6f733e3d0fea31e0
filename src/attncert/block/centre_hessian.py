"""The Hessian at the centre of a graph's rows: H_v = sum_n lambda_vn J_n^T (phi_n'' or the product's form) J_n.

For rows v with coefficients lambda_vn on the nonlinear nodes' outputs (the output g's centre adjoints, or any rows of
R), sum_n lambda_vn Q_n(delta) = 1/2 delta^T H_v delta exactly, Q_n the node's centre quadratic piece
(1/2 phi''(c) (j . delta)^2 for a unary node, (j_x . delta)(j_y . delta) for a product; block/taylor_model.py).
H_v is formed in float; its rounding, and phi'''s evaluation error, are bounded on the box:
max_{||u||_inf <= 1} |u^T (H_v - H_exact) u| <= gamma_{K+16} sum_n |lambda_vn| |phi_n''| s_n^2 (2 |lambda| s_x s_y for a
product), s = ||j||_1.
"""
from __future__ import annotations

import torch

from attncert.block.enclosure import FN_ULPS, U, Graph, inflate
from attncert.head.rounding import gamma


def centre_hessian(G: Graph, lam0: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(H (m, d, d) float, its rounding bound on the box (m,)) for the rows lam0: op.out -> (m, N) coefficients of
    that nonlinear op's nodes (ops absent from lam0 count as zero)."""
    H = None
    absum = None
    count = 0
    for op in G.ops:
        if op.kind == "linear" or op.out not in lam0:
            continue
        l0 = lam0[op.out]                                            # (m, N)
        if op.kind == "unary":
            z = G.vars[op.inputs[0]]
            A = l0 * op.curve.d2(z.c)
            term = torch.einsum("mn,nd,ne->mde", A, z.J, z.J)
            ab = (A.abs() * z.s ** 2).sum(-1) * (1.0 + FN_ULPS * U)
        else:
            x, y = (G.vars[i] for i in op.inputs)
            half = torch.einsum("mn,nd,ne->mde", l0, x.J, y.J)
            term = half + half.transpose(-1, -2)
            ab = 2.0 * (l0.abs() * x.s * y.s).sum(-1)
        count += l0.shape[1]
        H = term if H is None else H + term
        absum = ab if absum is None else absum + ab
    H = 0.5 * (H + H.transpose(-1, -2))
    return H, inflate(gamma(count + 16) * absum)


def quadratic_part_box(G: Graph, Rv: torch.Tensor) -> torch.Tensor:
    """(rows,) with rho^2 times it bounding |sum_k R_vk Q_k(delta)| over ||delta||_inf <= rho: 1/2 (sum_ij |H_v,ij| +
    rounding), H_v the rows' centre Hessian over the nodes whose columns Rv has (sum_ij |H_ij| >= max_u |u^T H u|)."""
    n = Rv.shape[1]
    lam = {op.out: Rv[:, op.cols[0]:op.cols[1]] for op in G.ops if op.kind != "linear" and op.cols[1] <= n}
    if not lam:
        return torch.zeros(Rv.shape[0], dtype=Rv.dtype)
    H, rounding = centre_hessian(G, lam)
    return inflate(0.5 * inflate(inflate(H.abs().sum((-1, -2))) + rounding))
