"""The output LayerNorm's range, re-derived by the audit (numpy): a bound on s g = s c . LN(y) over every input y.

LN(y) = gamma * n + beta, n = P y / sqrt(|P y|^2 / d + eps), P = I - 1 1^T / d: 1^T n = 0 and |n|_2 < sqrt(d), so

    max_y s c . LN(y) <= s c . beta + sqrt(d) || P (c * gamma) ||_2,    max s f <= that - s g0 + r ||G||_1

for f = g - g0 - G . delta over ||delta||_inf <= r (g0 the table's, G the certificate file's: free parameters).
Every float operation errs by at most u relatively; each bound is raised by gamma_k of its operation count.
"""
from __future__ import annotations

import math

import numpy as np

from attncert.audit.block_curves import up as _up
from attncert.head.rounding import UNIT_ROUNDOFF as U
from attncert.head.rounding import gamma

TINY = 1e-300


def g_range(C: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """(2, m): upper bounds of max_y s c . LN(y) for s = +1, -1."""
    C = np.asarray(C, dtype=np.float64)
    gain, bias = np.asarray(gain, dtype=np.float64), np.asarray(bias, dtype=np.float64)
    d = C.shape[1]
    w = C * gain
    pw = w - w.mean(-1, keepdims=True)
    err = gamma(d + 2) * (np.abs(w) + np.abs(w).mean(-1, keepdims=True) + np.abs(pw))
    norm = _up(np.sqrt(_up(((np.abs(pw) + err) ** 2).sum(-1), d + 1)), 2)
    spread = _up(norm * _up(math.sqrt(d), 1), 1)
    cb = C @ bias
    cb_err = _up(gamma(d) * (np.abs(C) @ np.abs(bias)), d + 1)
    out = np.stack([cb, -cb]) + _up(cb_err + spread, 1)
    return out + U * np.abs(out) + TINY


def f_range(g_up: np.ndarray, g0: np.ndarray, G: np.ndarray, r_t: np.ndarray) -> np.ndarray:
    """(2, m, R): upper bounds of max s f over ||delta||_inf <= r_t (R,) from `g_range`'s (2, m); +inf where G is not
    finite or not (m, d)."""
    m = g_up.shape[1]
    sign = np.array([1.0, -1.0])[:, None]
    off = g_up - sign * np.asarray(g0, dtype=np.float64)[None, :]
    off = off + U * np.abs(off) + TINY
    G = np.asarray(G, dtype=np.float64)
    if G.ndim != 2 or G.shape[0] != m or not np.isfinite(G).all():
        return np.full((2, m, len(r_t)), math.inf)
    lin = _up(np.abs(G).sum(-1), G.shape[1])
    out = off[:, :, None] + _up(lin[None, :, None] * np.asarray(r_t)[None, None, :], 1)
    out = out + U * np.abs(out) + TINY
    return np.where(np.isnan(out), math.inf, out)
