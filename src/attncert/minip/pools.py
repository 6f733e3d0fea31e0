"""Random token pools with disjoint train/test splits, and sequences drawn from them.

A pool is a set of distinct tokens in {0,1}^m (all 2^m of them when 2^m <= `max_pool`, else
`max_pool` distinct uniform random tokens). A seeded permutation splits it into a train pool and a
disjoint test pool (a `test_fraction` of the tokens). Sequences of length N draw their tokens
independently and uniformly from one pool:

    train   tokens from the train pool (the training stream)
    iid     fresh sequences over the train pool (tokens seen in training, new combinations)
    ood     sequences over the test pool: every token is unseen in training

The split depends only on (m, pool seed), so the runs of one setting share it; the training stream
and the model initialization depend on the run seed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .task import all_tokens


@dataclass(frozen=True)
class SplitPool:
    bits: int
    train: np.ndarray  # (P_train, m) int8
    test: np.ndarray   # (P_test, m) int8

    def disjoint(self) -> bool:
        a = {t.tobytes() for t in self.train}
        return not any(t.tobytes() in a for t in self.test)


def make_pool(bits: int, max_pool: int, rng: np.random.Generator) -> np.ndarray:
    """Distinct tokens: all of {0,1}^m if 2^m <= max_pool, else max_pool distinct random ones."""
    if bits <= 20 and 2 ** bits <= max_pool:
        return all_tokens(bits)
    seen: dict[bytes, np.ndarray] = {}
    while len(seen) < max_pool:
        for t in rng.integers(0, 2, size=(max_pool, bits), dtype=np.int8):
            seen.setdefault(t.tobytes(), t)
            if len(seen) == max_pool:
                break
    return np.stack(list(seen.values()))


def split_pool(bits: int, test_fraction: float, max_pool: int, seed: int) -> SplitPool:
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must lie in (0, 1)")
    rng = np.random.default_rng(seed)
    pool = make_pool(bits, max_pool, rng)
    perm = rng.permutation(len(pool))
    n_test = max(1, int(round(test_fraction * len(pool))))
    if n_test >= len(pool):
        raise ValueError(f"pool of {len(pool)} tokens is too small to split")
    return SplitPool(bits, train=pool[perm[n_test:]], test=pool[perm[:n_test]])


def sample_sequences(pool: np.ndarray, n_sequences: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """(n_sequences, length, m) int8 sequences with tokens drawn uniformly from `pool`."""
    idx = rng.integers(0, len(pool), size=(n_sequences, length))
    return pool[idx]
