"""The Min-IP task and its error criterion.

Problem. A sequence X = (x_1, ..., x_N) of Boolean tokens x_i in {0,1}^m. At every position i the
target is

    t_i(X) = min_{1 <= j <= N} <x_i, x_j>,

the minimum over all positions j, i included. Since <x_i, x_j> <= <x_i, x_i> = |x_i| for Boolean
vectors, including j = i changes nothing when N >= 2; for N = 1 the target is the weight |x_1|.

Error criterion. A real prediction y_i is *wrong* when |y_i - t_i| >= 1/2, i.e. when rounding y_i to the
nearest integer does not give t_i (a half-integer counts as wrong). The error of a model on a set of
sequences is the fraction of positions that are wrong. Targets are integers in {0, ..., m}, so a
prediction is right iff it lies in the open interval (t_i - 1/2, t_i + 1/2): this is the "error < 1/2"
notion of solving the task used by the lower bound (docs/minip.md).

Largest deviation. The paper's own metric is the largest deviation over a set of positions P,

    E_max = max_{(X, i) in P} |y_i(X) - t_i(X)|,

and a model solves P in the theorem's sense iff E_max < 1/2 -- the same event as "error = 0" above
(every position right), but E_max also says *how far* a failing model is from the targets (a share of
wrong positions of 3% can hide a deviation of 4). A NaN prediction makes E_max infinite.
"""
from __future__ import annotations

import numpy as np

HALF = 0.5


def all_tokens(m: int) -> np.ndarray:
    """All 2^m Boolean vectors of length m as rows (row k is the binary expansion of k, bit 0 first)."""
    if m < 0 or m > 24:
        raise ValueError(f"all_tokens: m={m} must be in 0..24")
    k = np.arange(2 ** m, dtype=np.int64)[:, None]
    return ((k >> np.arange(m)) & 1).astype(np.int8)


def minip_targets(X: np.ndarray) -> np.ndarray:
    """Targets t_i = min_j <x_i, x_j> for a batch of sequences.

    X: integer/bool array (..., N, m). Returns an int64 array (..., N).
    """
    X = np.asarray(X, dtype=np.int64)
    gram = X @ np.swapaxes(X, -1, -2)  # (..., N, N) pairwise inner products
    return gram.min(axis=-1)


def wrong(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Boolean mask of wrong positions: |pred - target| >= 1/2 (NaN counts as wrong)."""
    pred = np.asarray(pred, dtype=np.float64)
    ok = np.abs(pred - np.asarray(target, dtype=np.float64)) < HALF
    return ~ok


def error_rate(pred: np.ndarray, target: np.ndarray) -> float:
    """Fraction of positions wrong."""
    w = wrong(pred, target)
    return float(w.mean()) if w.size else 0.0


def max_abs_error(pred: np.ndarray, target: np.ndarray) -> float:
    """E_max = max |pred - target| over all entries (inf if any prediction is NaN; 0 for no entries)."""
    dev = np.abs(np.asarray(pred, dtype=np.float64) - np.asarray(target, dtype=np.float64))
    if dev.size == 0:
        return 0.0
    return float("inf") if np.isnan(dev).any() else float(dev.max())
