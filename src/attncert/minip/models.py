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

# torch's CPU bmm multiplies (B, n, k) by (B, k, p) with a plain loop when k * n * p < 400 (ATen's
# bmm_out_or_baddbmm_): each entry is summed in float from 0, one term after the other, k = 0, 1, ...
# The attention product w @ v of a head (n = k = N, the sequence length; p = m + value_dim) takes that
# path, and so does w^T @ grad in its backward. For k <= MAX_TERMS, the broadcast products summed over k
# (`_sum_of_products`) add the same float products in the same order from 0 (ATen's sum adds fewer than
# four terms one after the other), so they give the same bits, in about half the time at these sizes.
# tests/minip/test_training.py checks this bit for bit, forward and backward, over the sizes in use.
_NAIVE_BMM_LIMIT = 400
MAX_TERMS = 3


def _sum_of_products(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(B, n, k) x (B, k, p) -> (B, n, p): sum_k a[:, :, k] b[:, k, :], the terms added in order from 0."""
    return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)


class _AttentionProduct(torch.autograd.Function):
    """w @ v with torch's bmm backward (grad_w = grad @ v^T, grad_v = w^T @ grad), the products with k = N
    terms computed by `_sum_of_products`; only where `attention_product` allows it."""

    @staticmethod
    def forward(ctx, w, v):
        ctx.save_for_backward(w, v)
        return _sum_of_products(w, v)

    @staticmethod
    def backward(ctx, grad):
        w, v = ctx.saved_tensors
        grad_w = grad.bmm(v.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        grad_v = _sum_of_products(w.transpose(1, 2), grad) if ctx.needs_input_grad[1] else None
        return grad_w, grad_v


def sums_term_by_term(w: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether `attention_product(w, v)` is a sum of products: on the CPU in float32 with N <= MAX_TERMS and
    N * N * p < 400 (where torch's bmm sums term by term)."""
    _, n, k = w.shape if w.dim() == 3 else (0, 0, 0)
    return (w.device.type == "cpu" and w.dtype == v.dtype == torch.float32 and v.dim() == 3 and n == k
            and 0 < k <= MAX_TERMS and k * n * v.shape[-1] < _NAIVE_BMM_LIMIT)


def attention_product(w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """`w @ v` for attention weights w (B, N, N) and values v (B, N, p), bit for bit. Where
    `sums_term_by_term` it is computed as a sum of products, forward and backward; otherwise it is `w @ v`."""
    if sums_term_by_term(w, v):
        return _AttentionProduct.apply(w, v)
    return w @ v


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
        """x: (B, N, m) float 0/1 -> predictions (B, N).

        The submodules' `forward` methods are called directly, not through `Module.__call__` (whose hook
        handling costs a few microseconds a call, a few percent of a training step of these small heads):
        no hooks are registered on them, and the operations are the same."""
        h = x
        for layer in self.encoder:
            h = layer.forward(h)
        a, b, v, A, c = self.maps.forward(torch.cat([h, x], dim=-1)).split(self.sizes, dim=-1)
        w = torch.softmax(self.log_weights(a, b), dim=-1)
        o = attention_product(w, torch.cat([x, v], dim=-1))
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
