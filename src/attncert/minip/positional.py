"""Kernel attention whose maps depend on the position, and why the witness bound then needs both key orders.

Model. Position-dependent normalized nonnegative kernel attention over length-N sequences: every map
may read the position as well as the token,

    alpha_ij = <phi_Q^i(x_i), phi_K^j(x_j)> >= 0,   o_i = sum_j alpha_ij v^j(x_j) / sum_j alpha_ij,
    y_i = <A^i(x_i), o_i> + b^i(x_i).

The rank bound of `lower_bound` extends to this class when every mixed sequence of the family is
present in both key orders (x, z, z') and (x, z', z) (docs/minip.md, 4.6). Without the second order it
does not: on a family whose mixed sequences all put the better key at position 1 (our default witness
family), the rank-2 head

    phi_Q^0 = e_1,  phi_Q^1 = phi_Q^2 = e_2,   phi_K^0 = e_2,  phi_K^1 = e_1,  phi_K^2 = 0,
    v^j(x) = x,  A^i(x) = x,  b^i = 0

makes the query read the key at position 1 only (y_0 = <x_0, x_1>) and every other position read the
query only (y_i = <x_i, x_0>), which are exactly the targets of that family: zero error at rank 2,
below the position-independent bound. On the both-orders family it is wrong (the reversed sequences
put the worse key at position 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

Map = Callable[[np.ndarray], np.ndarray]  # (..., m) tokens -> (..., k) features


@dataclass(frozen=True)
class PositionalKernelHead:
    """Per-position maps: entry i of each list is the map used at position i."""
    phi_q: Sequence[Map]
    phi_k: Sequence[Map]
    value: Sequence[Map]
    read_a: Sequence[Map]
    read_b: Sequence[Map]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """X: (F, N, m) 0/1 sequences -> predictions (F, N)."""
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[-2]
        fq = np.stack([self.phi_q[i](X[..., i, :]) for i in range(n)], axis=-2)
        fk = np.stack([self.phi_k[j](X[..., j, :]) for j in range(n)], axis=-2)
        if (fq < 0).any() or (fk < 0).any():
            raise ValueError("feature maps must be nonnegative")
        v = np.stack([self.value[j](X[..., j, :]) for j in range(n)], axis=-2)
        alpha = fq @ np.swapaxes(fk, -1, -2)  # (F, N, N)
        o = (alpha @ v) / alpha.sum(axis=-1, keepdims=True)
        a = np.stack([self.read_a[i](X[..., i, :]) for i in range(n)], axis=-2)
        b = np.stack([self.read_b[i](X[..., i, :])[..., 0] for i in range(n)], axis=-1)
        return (a * o).sum(axis=-1) + b


def _const(vec) -> Map:
    vec = np.asarray(vec, dtype=np.float64)
    return lambda X: np.broadcast_to(vec, X.shape[:-1] + vec.shape).copy()


def one_order_rank2_head() -> PositionalKernelHead:
    """The rank-2 position-dependent head of the module docstring (length-3 sequences)."""
    e1, e2, zero = [1.0, 0.0], [0.0, 1.0], [0.0, 0.0]
    ident = [lambda X: X] * 3
    return PositionalKernelHead(phi_q=[_const(e1), _const(e2), _const(e2)],
                                phi_k=[_const(e2), _const(e1), _const(zero)],
                                value=ident, read_a=ident, read_b=[_const([0.0])] * 3)
