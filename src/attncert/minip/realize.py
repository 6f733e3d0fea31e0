"""Explicit parameters that place constructions inside the trained torch class (`models`).

A trained head computes all its maps from one linear layer on [h(x), x] (encoder output h, raw bits x):
each map is U h(x) + S x + c, and the kernel features are phi = exp(log-features). `set_raw_bit_maps`
sets U = 0 and chosen (S, c) per map, so the torch head becomes an explicit function of the bits.
Only maps whose logarithm is *affine in the raw bits* can be placed this way.

Construction 3, the 2^m positive features, in the limit L -> infinity (index c in {0,1}^m):
    log phi_Q(x)_c = -L d_H(c, x) = -L (|c| + |x| - 2 <c, x>),    log phi_K(z)_c = -beta <c, z>,
    v(x) = [x, 0], A(x) = [x, 0], b = 0.
Every kernel value then lies in [alpha, (1 + e^{beta - L})^m alpha] with alpha = e^{-beta <x, z>}
(per bit the sum over c_l has the exact term plus one term at most e^{beta - L} times it).

A rank-S head for the Hadamard witness family (no ladder, S >= 3; n bits, query weight w = n/2, gap
D = n/4; code words have bit 0 set, queries do not; e(x) = 1 - x_0 marks the queries):
    log phi_Q(x)_k = -L <a_k, x> + L D x_0          -> e_s at q_s, 1 - e_u at a_u   (up to e^{-L D})
    log phi_K(x)_k = -beta <q_k, x> + (ln B + beta D) e(x)
                                                     -> e^{-beta <q_k, a_u>} at a_u; B, except B e^{-beta D} at k = t,
                                                     at q_t
    v(x) = [x, e(x), 0...],  A(x) = [x, -D e(x), 0...],  b = 0.
The query q_s reads itself with weight about B e^{-beta D} against 1 for its good key and e^{-beta D}
for the others, and reads its own token as <q_s, q_s> - D = D (the read-out term -D e(x_i) e(x_j));
so on (q_s, a_t, a_t) every token it reads has value D = target, and on sequences with a_s the
deviation is about B e^{-beta D} D. Every code word reads the query with weight >= B (S - 2) against
<= S per code word: deviation <= 2 S w / (B (S - 2)). This differs from construction 5 (whose
phi_K(q_s)_s = e^{-beta w} is not reachable: for maps affine in the bits, q_t = 1 - a_t forces
log phi_K(q_t)_s - log phi_K(q_s)_s = beta D), hence the read-out term.
"""
from __future__ import annotations

import numpy as np
import torch

from .task import all_tokens

MAP_NAMES = ("q", "k", "v", "a", "b")  # the blocks of model.sizes, in order


def set_raw_bit_maps(model, maps: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Set map `name` to x -> S x + c for every (S, c) in `maps` (others 0); the encoder is cut off."""
    W, bias = model.maps.weight, model.maps.bias
    hidden = W.shape[1] - model.bits
    off = np.cumsum([0] + list(model.sizes))
    with torch.no_grad():
        W.zero_()
        bias.zero_()
        for name, (S, c) in maps.items():
            i = MAP_NAMES.index(name)
            rows = slice(off[i], off[i] + S.shape[0])
            if S.shape[0] > model.sizes[i] or S.shape[1] != model.bits:
                raise ValueError(f"map {name!r}: shape {S.shape} does not fit the head")
            W[rows, hidden:] = torch.as_tensor(S, dtype=W.dtype)
            bias[rows] = torch.as_tensor(c, dtype=bias.dtype)


def positive_feature_maps(m: int, beta: float, sharp: float) -> dict:
    """Construction 3 in the limit `sharp` = L -> infinity; needs a kernel head of rank 2^m."""
    C = all_tokens(m).astype(np.float64)  # (2^m, m)
    ones = np.ones(m)
    return {"q": (sharp * (2 * C - ones), -sharp * C.sum(axis=1)),
            "k": (-beta * C, np.zeros(len(C))),
            "a": (np.eye(m), np.zeros(m))}


def witness_rank_s_maps(family, beta: float, big: float, sharp: float, value_dim: int) -> dict:
    """The rank-S head for the witness family described in the module docstring."""
    a = family.code.astype(np.float64)
    q = family.queries.astype(np.float64)
    S, n = a.shape
    words = {w.tobytes() for w in family.code}
    keys_are_words = all(z.tobytes() in words for z in family.sequences[:, 1:].reshape(-1, n))
    if S < 3 or value_dim < 1 or not keys_are_words or (a[:, 0] != 1).any() or (q[:, 0] != 0).any():
        raise ValueError("needs S >= 3 queries, value_dim >= 1 and a family without ladder keys")
    D = float(family.gap)
    bit0 = np.zeros(n)
    bit0[0] = 1.0
    shift = np.log(big) + beta * D
    V = np.zeros((value_dim, n))
    V[0] = -bit0                                     # e(x) = 1 - x_0
    A = np.zeros((n + value_dim, n))
    A[:n] = np.eye(n)
    A[n] = D * bit0                                  # -D e(x) = -D + D x_0
    cA = np.zeros(n + value_dim)
    cA[n] = -D
    return {"q": (-sharp * a + sharp * D * bit0, np.zeros(S)),
            "k": (-beta * q - shift * bit0, np.full(S, shift)),
            "v": (V, np.eye(value_dim)[0]),
            "a": (A, cA)}
