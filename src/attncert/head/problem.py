"""One attention head under perturbation of the normalized tokens it reads (Paper A).

Notation (row-vector orientation, as GPT-2's Conv1D stores it; documented in docs/extraction.md):

    z_j  in R^d          normalized token j (LayerNorm output, gain and bias applied)
    q_i  = z_i W_Q + b_Q     W_Q in R^{d x d_h}
    k_j  = z_j W_K + b_K
    v_j  = z_j W_V + b_V
    s_j  = q_i . k_j / sqrt(d_h)          for the attended positions j (causal: j <= i; else all j)
    a    = softmax(s)
    g(Z) = c . sum_j a_j v_j              c in R^{d_h}: the linear specification on the head output

The perturbation moves every attended token inside a ball of radius r around its nominal value:
    ||z_j - z_j^0||_inf <= r   (norm="linf")   or   ||z_j - z_j^0||_2 <= r   (norm="l2").

Mode "fixed": the query vector q_i is held at its nominal value (token i still moves as a key and a
value). Mode "varying": q_i = (z_i^0 + delta_i) W_Q + b_Q moves with the perturbation of token i.
(For a bidirectional model where the query token is attended, the same holds.)

The specification c: a seeded random unit direction u of the residual stream pulled back through
the head's output projection, c = W_O u (W_O in R^{d_h x d} maps the head output into the residual
stream), normalized to unit length (see `specification.specification_direction`).
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

NORMS = ("linf", "l2")
MODES = ("fixed", "varying")


@dataclass(frozen=True)
class HeadProblem:
    """A complete certification unit: maximize g(Z) over the perturbation set.

    Arrays are float64. `Z0` holds only the attended tokens (positions 0..query_index for a causal
    head, all positions for a bidirectional one); `query_index` indexes into `Z0`. The constructor rejects,
    with one `ValueError` line, what would give a meaningless bound: an empty head (d = 0, d_h = 0 or
    n = 0), shapes that do not agree, NaN or infinite entries, a query index outside `Z0`, a radius that is
    not positive and finite, an unknown norm or mode.
    """

    W_Q: np.ndarray  # (d, d_h)
    W_K: np.ndarray  # (d, d_h)
    W_V: np.ndarray  # (d, d_h)
    b_Q: np.ndarray  # (d_h,)
    b_K: np.ndarray  # (d_h,)
    b_V: np.ndarray  # (d_h,)
    Z0: np.ndarray  # (n, d) nominal normalized tokens that are attended
    query_index: int
    c: np.ndarray  # (d_h,)
    radius: float
    norm: str = "linf"
    mode: str = "fixed"
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        for name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "Z0", "c"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        if self.W_Q.ndim != 2 or 0 in self.W_Q.shape:
            raise ValueError(f"W_Q must be (d, d_h) with d >= 1 and d_h >= 1 (an empty head has nothing to certify); "
                             f"got {self.W_Q.shape}")
        d, dh = self.W_Q.shape
        if self.W_K.shape != (d, dh) or self.W_V.shape != (d, dh):
            raise ValueError(f"W_Q, W_K, W_V must all be (d, d_h) = {(d, dh)}; got {self.W_K.shape}, {self.W_V.shape}")
        for name in ("b_Q", "b_K", "b_V"):
            if getattr(self, name).shape != (dh,):
                raise ValueError(f"{name} must be ({dh},); got {getattr(self, name).shape}")
        if self.Z0.ndim != 2 or self.Z0.shape[1] != d or self.Z0.shape[0] == 0:
            raise ValueError(f"Z0 must be (n, {d}) with n >= 1 attended tokens; got {self.Z0.shape}")
        if self.c.shape != (dh,):
            raise ValueError(f"c must be ({dh},); got {self.c.shape}")
        for name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "Z0", "c"):
            bad = ~np.isfinite(getattr(self, name))
            if bad.any():
                raise ValueError(
                    f"{name} holds {int(bad.sum())} NaN or infinite entr{'y' if bad.sum() == 1 else 'ies'} "
                    f"(first at index {tuple(int(i) for i in np.argwhere(bad)[0])}); every input must be finite"
                )
        if isinstance(self.query_index, bool) or not isinstance(self.query_index, (int, np.integer)):
            raise ValueError(f"query_index must be an integer; got {self.query_index!r}")
        if not 0 <= self.query_index < self.Z0.shape[0]:
            raise ValueError(f"query_index {self.query_index} out of range for {self.Z0.shape[0]} attended tokens")
        if not (np.isfinite(self.radius) and self.radius > 0):
            raise ValueError(f"radius must be a positive finite number; got {self.radius}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}; got {self.norm!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}; got {self.mode!r}")

    # ----- shapes -----
    @property
    def n(self) -> int:
        return self.Z0.shape[0]

    @property
    def d(self) -> int:
        return self.W_Q.shape[0]

    @property
    def d_head(self) -> int:
        return self.W_Q.shape[1]

    def negated(self) -> "HeadProblem":
        """The same unit with specification -c: min g = -max(-g)."""
        return HeadProblem(self.W_Q, self.W_K, self.W_V, self.b_Q, self.b_K, self.b_V, self.Z0,
                           self.query_index, -self.c, self.radius, self.norm, self.mode, dict(self.meta))

    def with_radius(self, radius: float) -> "HeadProblem":
        return HeadProblem(self.W_Q, self.W_K, self.W_V, self.b_Q, self.b_K, self.b_V, self.Z0,
                           self.query_index, self.c, radius, self.norm, self.mode, dict(self.meta))

    # ----- the function being bounded -----
    def nominal_query(self) -> np.ndarray:
        return self.Z0[self.query_index] @ self.W_Q + self.b_Q

    def value(self, Z: np.ndarray) -> float:
        """g(Z) for perturbed attended tokens Z (n, d), computed directly (float64)."""
        Z = np.asarray(Z, dtype=np.float64)
        q = self.nominal_query() if self.mode == "fixed" else Z[self.query_index] @ self.W_Q + self.b_Q
        s = (Z @ self.W_K + self.b_K) @ q / np.sqrt(self.d_head)
        a = np.exp(s - s.max())
        a /= a.sum()
        w = (Z @ self.W_V + self.b_V) @ self.c
        return float(a @ w)

    def nominal_value(self) -> float:
        return self.value(self.Z0)

    def in_ball(self, Z: np.ndarray, tol: float = 0.0) -> bool:
        D = np.asarray(Z, dtype=np.float64) - self.Z0
        if self.norm == "linf":
            return bool(np.all(np.abs(D) <= self.radius + tol))
        return bool(np.all(np.linalg.norm(D, axis=1) <= self.radius + tol))

    def project(self, Z: np.ndarray) -> np.ndarray:
        """Euclidean projection of Z onto the perturbation set (per token)."""
        D = np.asarray(Z, dtype=np.float64) - self.Z0
        if self.norm == "linf":
            D = np.clip(D, -self.radius, self.radius)
        else:
            nrm = np.linalg.norm(D, axis=1, keepdims=True)
            D = D * np.minimum(1.0, self.radius / np.maximum(nrm, 1e-300))
        return self.Z0 + D

    def dual_norm(self, u: np.ndarray) -> float:
        """max_{||delta|| <= 1} u . delta  (l1 norm for the box, l2 norm for the ball)."""
        return float(np.abs(u).sum()) if self.norm == "linf" else float(np.linalg.norm(u))


def cached_by_weights(arrays: int = 2, maxsize: int = 64):
    """Memoize fn(A_1, ..., A_arrays, *args) on the exact contents of the leading arrays and the (hashable) args.

    For per-head constants (bounds on W_Q W_K^T, extended-precision copies of the weights) needed by every unit
    of a head. A stored entry keeps copies of the arrays and is used only when every one compares equal
    elementwise to the argument, so a changed array is never served a stale value.
    """
    def probe(a: np.ndarray) -> bytes:
        flat = a.ravel()
        return flat[::max(1, flat.size // 64)].tobytes()

    def deco(fn):
        store: OrderedDict = OrderedDict()

        @functools.wraps(fn)
        def wrapper(*call):
            arrs, args = [np.asarray(a) for a in call[:arrays]], call[arrays:]
            key = (args, *((a.shape, a.dtype.str, probe(a)) for a in arrs))
            hit = store.get(key)
            if hit is not None and all(np.array_equal(h, a) for h, a in zip(hit[0], arrs)):
                store.move_to_end(key)
                return hit[1]
            value = fn(*arrs, *args)
            store[key] = ([a.copy() for a in arrs], value)
            if len(store) > maxsize:
                store.popitem(last=False)
            return value

        wrapper.cache_clear = store.clear
        return wrapper

    return deco


def random_head_problem(rng: np.random.Generator, d: int = 4, d_head: int = 3, n: int = 4,
                        radius: float = 0.1, norm: str = "linf", mode: str = "fixed",
                        scale: float = 1.0) -> HeadProblem:
    """A random small head, for tests and property checks."""
    W = [rng.standard_normal((d, d_head)) * scale for _ in range(3)]
    b = [rng.standard_normal(d_head) * 0.3 for _ in range(3)]
    Z0 = rng.standard_normal((n, d))
    c = rng.standard_normal(d_head)
    c /= np.linalg.norm(c)
    return HeadProblem(W[0], W[1], W[2], b[0], b[1], b[2], Z0, n - 1, c, radius, norm, mode)
