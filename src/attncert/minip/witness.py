"""The structured length-3 witness family.

Construction. Take the constant-weight code a_1..a_S in {0,1}^n of `codes.constant_weight_code`
(weight n/2, pairwise intersections n/4) and the queries q_s = 1 - a_s (the complements). Then

    <q_s, a_s> = 0,      <q_s, a_t> = |a_t \\ a_s| = n/4  (t != s),      |q_s| = n/2,

so for query q_s the key a_s is the unique "good" candidate and every other code word is worse by the
gap D = n/4. For every query s the family holds the length-3 sequences (query first)

    (q_s, a_s, a_s)                 target at the query 0
    (q_s, a_t, a_t)   for t != s    target n/4
    (q_s, a_s, a_t)   for t != s    target 0

-- exactly the three sequences per pair that gap domination needs (docs/minip.md) -- that is
S (2S - 1) sequences. Optionally a *ladder* of intermediate keys z_{s,l} = a_s + (the first l*step
bits of q_s), with <q_s, z_{s,l}> = l*step for 1 <= l*step < D, is added together with the sequences
(q_s, z, z), (q_s, a_s, z), (q_s, z, z') and (q_s, z, a_t) that let the lower bound chain gap
domination through the intermediate overlaps (amplification).

The designated query is position 0; the targets of all three positions are part of the task, and
the error of a model on the suite counts every position.

Key order. Each mixed sequence appears in one key order only (good key first). For the trained heads,
whose maps read the token alone, the other order (q_s, z', z) is a permutation of the same positions
and adds nothing. `both_orders=True` adds it anyway: with it the family's rank bound also covers
heads whose feature maps depend on the position (docs/minip.md, section 4.6); without it that bound
fails (a rank-2 position-dependent head solves the one-order family, `positional`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .codes import constant_weight_code
from .task import minip_targets


@dataclass(frozen=True)
class WitnessFamily:
    bits: int
    code: np.ndarray         # (S, n) the words a_s
    queries: np.ndarray      # (S, n) q_s = 1 - a_s
    good: np.ndarray         # (S, n) the good key of each query (a_s)
    sequences: np.ndarray    # (F, 3, n) int8, query at position 0
    query_of: np.ndarray     # (F,) index s of the query of each sequence
    targets: np.ndarray      # (F, 3) Min-IP targets

    @property
    def size(self) -> int:
        return int(self.sequences.shape[0])

    @property
    def n_queries(self) -> int:
        return int(self.code.shape[0])

    @property
    def gap(self) -> int:
        """The overlap gap D = min_{s != t} <q_s, a_t> - <q_s, a_s>."""
        G = self.queries.astype(np.int64) @ self.good.T.astype(np.int64)
        S = G.shape[0]
        return int(min(G[s, t] - G[s, s] for s in range(S) for t in range(S) if s != t))


def _ladder(query: np.ndarray, good: np.ndarray, step: int, gap: int) -> list[np.ndarray]:
    support = np.flatnonzero(query)
    out = []
    for level in range(step, gap, step):
        z = good.copy()
        z[support[:level]] = 1
        out.append(z)
    return out


def witness_family(bits: int, n_queries: int, ladder_step: int = 0, both_orders: bool = False) -> WitnessFamily:
    """The witness family over {0,1}^bits with `n_queries` code words (see the module docstring)."""
    code = constant_weight_code(bits, n_queries)
    queries = (1 - code).astype(np.int8)
    gap = bits // 4
    seqs: list[np.ndarray] = []
    owner: list[int] = []

    def add(s, z, zz):
        seqs.append(np.stack([queries[s], z, zz]))
        owner.append(s)
        if both_orders and not np.array_equal(z, zz):
            seqs.append(np.stack([queries[s], zz, z]))
            owner.append(s)

    for s in range(n_queries):
        a_s = code[s]
        add(s, a_s, a_s)
        for t in range(n_queries):
            if t != s:
                add(s, code[t], code[t])
                add(s, a_s, code[t])
        if ladder_step:
            ladder = _ladder(queries[s], a_s, ladder_step, gap)
            for i, z in enumerate(ladder):
                add(s, z, z)
                add(s, a_s, z)
                for z2 in ladder[i + 1:]:
                    add(s, z, z2)
                for t in range(n_queries):
                    if t != s:
                        add(s, z, code[t])
    sequences = np.asarray(seqs, dtype=np.int8)
    return WitnessFamily(bits=bits, code=code, queries=queries, good=code.copy(), sequences=sequences,
                         query_of=np.asarray(owner, dtype=np.int64), targets=minip_targets(sequences))
