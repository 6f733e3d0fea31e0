"""Tokens that can never carry weight: dropped from a relaxation, their effect bounded by a sound tail.

Shared by the fixed query (through `reduced_geometry.ReducedGeometry.kept_tokens`) and the varying query.
"""
from __future__ import annotations

import math

import numpy as np

NEGLIGIBLE = 60.0  # tokens whose weight share is below e^-NEGLIGIBLE under every perturbation are dropped


def negligible_tokens(A: np.ndarray, h: np.ndarray, eps: np.ndarray, W_hi: np.ndarray, W_lo: np.ndarray,
                      keep_always: int | None = None) -> tuple[np.ndarray, float]:
    """(keep mask, tail) for dropping tokens that can never carry weight, with a sound bound on their effect.

    Token j's weight share is at most e^{A_j + h_j + eps_j} / Z_lo, Z_lo = sum over kept tokens k of
    e^{A_k - h_k - eps_k} (the smallest denominator). Tokens with share below e^-NEGLIGIBLE are dropped
    (`keep_always`, e.g. the varying query token, never is). For every perturbation, with g' the head
    restricted to the kept tokens, g - g' = sum_drop e_j (w_j - g') / Z <= sum_drop (e_j / Z_kept)(w_j - g')_+
    <= tail = sum_drop e^{A_j + h_j + eps_j} / Z_lo * (W_hi_j - min_kept W_lo_k)_+, so a bound on max g' plus
    tail bounds max g. Besides shrinking the program this removes lower weight bounds that underflow.
    """
    n = A.size
    upper = A + h + eps
    lower = A - h - eps
    keep = np.ones(n, dtype=bool)
    for _ in range(3):  # dropping lowers Z_lo: re-check until stable
        m = float(np.max(lower[keep]))
        logZ = m + math.log(float(np.sum(np.exp(lower[keep] - m))))
        new = upper - logZ > -NEGLIGIBLE
        if keep_always is not None:
            new[keep_always] = True
        if not np.any(new):
            new[int(np.argmax(upper))] = True
        if np.array_equal(new & keep, keep):
            break
        keep = new & keep
    if np.all(keep):
        return keep, 0.0
    m = float(np.max(lower[keep]))
    logZ = m + math.log(float(np.sum(np.exp(lower[keep] - m))))
    floor = float(np.min(W_lo[keep]))
    share = np.exp(upper[~keep] - logZ)
    tail = float(np.sum(share * np.maximum(W_hi[~keep] - floor, 0.0)))
    return keep, 4.0 * tail * (1.0 + 1e-6) + 1e-300
