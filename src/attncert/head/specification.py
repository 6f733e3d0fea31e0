"""The linear specification c of a head's output, seeded per unit (shared by every stage).

c = W_O u / ||W_O u|| for a standard-normal direction u of the residual stream (W_O: the head's rows
of the output projection, d_h x d), so c . (head output) is the head's contribution to the residual
stream along u. The seed of u is a deterministic function of (base seed, layer, head, prompt, query
position), so the certification, baseline and block stages read the same direction for a unit; the block
stage's rows (`specification_rows`) are the values the next layer's heads read along it.
"""
from __future__ import annotations

import numpy as np


def spec_seed(base: int, layer: int, head: int, prompt: int, query_pos: int) -> int:
    """A deterministic seed per (layer, head, prompt, query position)."""
    return int(np.random.SeedSequence([base, layer, head, prompt, query_pos]).generate_state(1)[0])


def specification_direction(W_O: np.ndarray, seed: int) -> np.ndarray:
    """c = W_O u / ||W_O u|| for a seeded standard-normal direction u of the residual stream.

    W_O: (d_h, d), the rows of the output projection that belong to this head.
    """
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(W_O.shape[1])
    c = W_O @ u
    return c / np.linalg.norm(c)


def specification_rows(W_V_next: np.ndarray, W_O_next: np.ndarray, layer_next: int, heads: list[int],
                       prompt: int, position: int, base_seed: int) -> np.ndarray:
    """Specification rows w_h (len(heads), d): the value the head of block l+1 reads along its own
    certification direction, w_h = W_V[h] c_h / ||W_V[h] c_h||, with c_h the certification stage's
    specification vector of (layer l+1, head h, prompt, query position) (`specification_direction`), so
    g_h = w_h . F is c_h . v_i up to the value bias and a positive scale."""
    rows = []
    for h in heads:
        c = specification_direction(W_O_next[h], spec_seed(base_seed, layer_next, h, prompt, position))
        w = W_V_next[h] @ c
        rows.append(w / np.linalg.norm(w))
    return np.stack(rows)
