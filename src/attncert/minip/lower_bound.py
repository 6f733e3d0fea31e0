"""Rank lower bound for a finite family of length-3 Min-IP inputs (derivation in docs/minip.md).

Model. For a fixed query token x, a normalized nonnegative kernel head with any query-dependent affine
read-out predicts, on a sequence (x, z, z'),

    y = (k_0 g_0 + k_z g_z + k_z' g_z') / (k_0 + k_z + k_z'),   k_u = alpha(x, u) >= 0,
                                                                g_u = A(x) v(u) + b(x),

a weighted average of per-token scalars (the affine read-out commutes with the convex combination);
k_0, g_0 belong to the query token itself. Write W_u = k_0 + 2 k_u.

1. Gap domination. If <x, z> = a < b = <x, z'> and the head is right (|y - t| < 1/2) at the query
   on the three sequences (x, z, z), (x, z', z'), (x, z, z'), then W_z > (b - a - 1) W_z'.
   (y(z, z') is the W-weighted average of y(z, z) > a - 1/2 and y(z', z') > b - 1/2 and must stay
   below a + 1/2, so the weight W_z'/(W_z + W_z') is below 1/(b - a).)
2. Amplification. Along a chain z_0 -> z_1 -> ... -> z_L of such pairs, W_{z_0} > prod_l (d_l - 1)
   W_{z_L}; the best chain factor R(x; z_0 -> z_L) is a longest path in a DAG ordered by <x, .>.
   From W_a > R W_b with R >= 1 follows k_b < k_a / R and k_a > 0.
3. Rank bound. For queries q_1..q_S with good keys a_1..a_S let M_st = alpha(q_s, a_t) and
   R_st = R(q_s; a_s -> a_t). Then B = diag(M)^{-1} M has unit diagonal and 0 <= B_st < 1/R_st.
   (a) Approximate identity: rank M = rank B >= tr(B)^2 / ||B||_F^2 (Schur's inequality), so
       r > S^2 / (S + sum_{s != t} R_st^-2).
   (b) Dominant features (uses nonnegativity): in M = Phi Psi^T (Phi, Psi >= 0, r columns) each s has
       a feature k(s) with Phi_sk Psi_sk >= M_ss / r; two queries sharing it force
       M_st M_ts >= M_ss M_tt / r^2, impossible when R_st R_ts >= r^2. So the pairs with
       R_st R_ts >= r^2 form a graph whose cliques need distinct features: r is impossible when that
       graph has a clique larger than r.
   The proven bound is the larger of (a) and (b); both are computed in exact rational arithmetic.

Position-dependent maps (docs/minip.md, 4.6). If phi_Q, phi_K, v, A, b may depend on the position,
the same bound holds with W_u = k_0 + k_1(u) + k_2(u) (u's weights at positions 1 and 2) and the kernel
M_st = <phi_Q^0(q_s), phi_K^1(a_t) + phi_K^2(a_t)>, *provided* both key orders (x, z, z') and (x, z', z)
are in the family: then N(z,z') + N(z',z) = N(z,z) + N(z',z') for the numerators and denominators of
the predictions, and Lemma 1 follows by adding the two mixed inequalities. `position_dependent=True`
certifies a domination edge only when both orders are present.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np


def _key(u: np.ndarray) -> bytes:
    return np.asarray(u, dtype=np.int8).tobytes()


def chain_ratios(query: np.ndarray, pairs: list[tuple[np.ndarray, np.ndarray]], source: np.ndarray,
                 position_dependent: bool = False) -> dict[bytes, int]:
    """Best certified ratio R(query; source -> z) for every key z reachable from `source`.

    `pairs` are the candidate pairs (z, z') of the sequences (query, z, z') present in the family. A
    domination edge z -> z' (factor b - a - 1, a = <x,z> < b = <x,z'>) needs the three sequences
    (x,z,z), (x,z',z'), (x,z,z') -- in either key order, or in both orders when `position_dependent`.
    Returns {key bytes: integer product of factors} (source -> 1).
    """
    x = np.asarray(query, dtype=np.int64)
    level: dict[bytes, int] = {}
    ordered: set[tuple[bytes, bytes]] = set()
    for z, zz in pairs:
        kz, kzz = _key(z), _key(zz)
        level[kz] = int(x @ np.asarray(z, dtype=np.int64))
        level[kzz] = int(x @ np.asarray(zz, dtype=np.int64))
        ordered.add((kz, kzz))

    def covered(k, k2):
        both = (k, k2) in ordered and (k2, k) in ordered
        return both if position_dependent else ((k, k2) in ordered or (k2, k) in ordered)

    doubles = [k for k in level if (k, k) in ordered]
    src = _key(source)
    best: dict[bytes, int] = {src: 1} if src in doubles else {}
    for k in sorted(doubles, key=level.get):  # DAG: edges go to strictly higher levels
        if k not in best:
            continue
        for k2 in doubles:
            gap = level[k2] - level[k]
            if gap >= 2 and covered(k, k2):
                cand = best[k] * (gap - 1)
                if cand > best.get(k2, 0):
                    best[k2] = cand
    return best


def ratio_matrix(queries: np.ndarray, good: np.ndarray, sequences: np.ndarray,
                 position_dependent: bool = False) -> np.ndarray:
    """R_st = R(q_s; a_s -> a_t) over the sequences whose position 0 is q_s (0 where no chain; diag 1)."""
    S = len(queries)
    R = np.zeros((S, S), dtype=object)
    for s in range(S):
        mine = [(seq[1], seq[2]) for seq in sequences if np.array_equal(seq[0], queries[s])]
        best = chain_ratios(queries[s], mine, good[s], position_dependent)
        for t in range(S):
            R[s, t] = 1 if s == t else best.get(_key(good[t]), 0)
    return R


def _max_clique(adj: list[set[int]]) -> int:
    """Size of a maximum clique (Bron-Kerbosch with pivoting; the graphs here have <= ~50 nodes)."""
    best = 0

    def expand(R: int, P: set[int], X: set[int]) -> None:
        nonlocal best
        if not P and not X:
            best = max(best, R)
            return
        if R + len(P) <= best:
            return
        pivot = max(P | X, key=lambda u: len(adj[u] & P))
        for v in list(P - adj[pivot]):
            expand(R + 1, P & adj[v], X & adj[v])
            P = P - {v}
            X = X | {v}

    expand(0, set(range(len(adj))), set())
    return best


@dataclass(frozen=True)
class RankBound:
    n_queries: int
    min_ratio: int
    frobenius_value: Fraction                  # S^2 / (S + sum R^-2): the rank is strictly larger
    frobenius: int                             # smallest integer rank allowed by (a)
    dominant: int                              # smallest integer rank allowed by (b)
    bound: int = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "bound", max(self.frobenius, self.dominant))


def rank_lower_bound(R: np.ndarray) -> RankBound:
    """The proven lower bound on the feature rank from a ratio matrix R (all off-diagonal R_st >= 1)."""
    S = R.shape[0]
    off = [int(R[s, t]) for s in range(S) for t in range(S) if s != t]
    if any(v < 1 for v in off):
        raise ValueError("every ordered pair of queries needs a domination chain (R_st >= 1)")
    if S == 1:
        return RankBound(1, 0, Fraction(1), 1, 1)
    frob_value = Fraction(S * S) / (S + sum(Fraction(1, v * v) for v in off))
    frobenius = math.floor(frob_value) + 1  # rank > frob_value strictly
    dominant = 1
    while True:
        adj = [{t for t in range(S) if t != s and int(R[s, t]) * int(R[t, s]) >= dominant ** 2} for s in range(S)]
        if _max_clique(adj) <= dominant:
            break
        dominant += 1
    return RankBound(S, min(off), frob_value, frobenius, dominant)


def witness_bound(family, position_dependent: bool = False) -> RankBound:
    """The bound for a `witness.WitnessFamily` (for position-dependent maps: needs both key orders)."""
    return rank_lower_bound(ratio_matrix(family.queries, family.good, family.sequences, position_dependent))


def position_dependent_bound(family) -> int | None:
    """The bound valid also for position-dependent feature maps, or None if the family does not give one."""
    try:
        return witness_bound(family, position_dependent=True).bound
    except ValueError:  # some pair of queries has no chain covered in both key orders
        return None


def bound_record(family) -> dict:
    """A JSON-ready summary of the witness family and its proven bound."""
    b = witness_bound(family)
    return {"bits": family.bits, "n_queries": family.n_queries, "family_size": family.size, "gap": family.gap,
            "min_ratio": b.min_ratio, "frobenius_value": str(b.frobenius_value),
            "frobenius_value_float": float(b.frobenius_value), "frobenius": b.frobenius,
            "dominant": b.dominant, "bound": b.bound,
            "bound_position_dependent": position_dependent_bound(family)}
