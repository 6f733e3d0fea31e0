"""Trainable heads (torch): normalized nonnegative kernel attention of rank r, and dense softmax.

Every map reads the token alone. A token encoder h(x) in R^H (`depth` layers of GELU(W . + c))
feeds one linear layer on [h(x), x] -- the raw bits x are a skip path -- whose output is split into
the maps of the head (each map is thus U h(x) + S x + c):

    kernel head   log phi_Q(x), log phi_K(x) in R^r;  phi = exp(.) in R^r_{>0} (the nonnegativity map)
                  alpha_ij = <phi_Q(x_i), phi_K(x_j)>,   log alpha_ij = logsumexp_k(lq_ik + lk_jk)
    dense head    Q(x), K(x) in R^{d_k} (d_k = m);  s_ij = <Q(x_i), K(x_j)>
    both          v(x) = [x, V(x)] in R^{m + p},   o_i = sum_j w_ij v(x_j),
                  w_i = alpha_i / sum_j alpha_ij  (kernel)  or  softmax(s_i)  (dense),
                  y_i = <A(x_i), o_i> + b(x_i)    (query-dependent affine read-out)

With the skip path all constructions of `constructions` with v(x) = x lie in the class (rank 1:
log phi = 0, A(x) = 2x, b(x) = -|x|; dense: Q(x) = -beta x, K(x) = x). The kernel weights are
computed as softmax_j(log alpha_ij), which equals alpha_ij / sum_j alpha_ij exactly and cannot overflow.
"""
from __future__ import annotations

import torch
from torch import nn

NONNEGATIVITY = "exp"


class _Head(nn.Module):
    def __init__(self, bits: int, hidden: int, value_dim: int, score_sizes: list[int], depth: int = 1):
        super().__init__()
        self.bits = bits
        layers: list[nn.Module] = []
        for i in range(depth):
            layers += [nn.Linear(bits if i == 0 else hidden, hidden), nn.GELU()]
        self.encoder = nn.Sequential(*layers)
        self.sizes = list(score_sizes) + [value_dim, bits + value_dim, 1]
        self.maps = nn.Linear(hidden + bits, sum(self.sizes))

    def log_weights(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, N, m) float 0/1 -> predictions (B, N)."""
        a, b, v, A, c = self.maps(torch.cat([self.encoder(x), x], dim=-1)).split(self.sizes, dim=-1)
        w = torch.softmax(self.log_weights(a, b), dim=-1)
        o = w @ torch.cat([x, v], dim=-1)
        return (A * o).sum(-1) + c.squeeze(-1)


class KernelAttention(_Head):
    """One head of normalized nonnegative kernel attention with feature rank r (exp features)."""

    def __init__(self, bits: int, rank: int, hidden: int = 64, value_dim: int = 16, depth: int = 1):
        super().__init__(bits, hidden, value_dim, [rank, rank], depth)
        self.rank = rank

    def log_weights(self, lq, lk):  # log alpha_ij = logsumexp_k (log phi_Q(x_i)_k + log phi_K(x_j)_k)
        return torch.logsumexp(lq.unsqueeze(-2) + lk.unsqueeze(-3), dim=-1)


class DenseAttention(_Head):
    """One head of dense softmax attention with d_k-dimensional scores (d_k = m by default)."""

    def __init__(self, bits: int, hidden: int = 64, value_dim: int = 16, depth: int = 1,
                 score_dim: int | None = None):
        d = score_dim or bits
        super().__init__(bits, hidden, value_dim, [d, d], depth)

    def log_weights(self, q, k):
        return q @ k.transpose(-1, -2)


def build_model(kind: str, bits: int, rank: int | None, hidden: int, value_dim: int, depth: int = 1) -> _Head:
    if kind == "kernel":
        if not rank or rank < 1:
            raise ValueError("a kernel head needs a rank >= 1")
        return KernelAttention(bits, rank, hidden, value_dim, depth)
    if kind == "dense":
        return DenseAttention(bits, hidden, value_dim, depth)
    raise ValueError(f"unknown model kind {kind!r}: use 'kernel' or 'dense'")
