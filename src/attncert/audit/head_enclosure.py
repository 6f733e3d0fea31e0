"""The exact head quantities of one unit, enclosed in ball arithmetic from the extracted weights alone.

A unit's problem is defined by two files: `data/extract/{model}/layer{L}.npz` (W_Q, W_K, W_V, b_Q, b_K, b_V per
head, the normalized tokens Z per prompt, `causal`) and `data/certify/{model}/layer{L}_spec.npz` (the
specification c per head, prompt and query position). Reading them needs numpy only (this module does not use
the pipeline's loaders, which import torch).

With q0 = z_i W_Q + b_Q (the nominal query), in exact real arithmetic on the float64 data:

    u_s = W_K q0 / sqrt(d_h),   s0_j = z_j . u_s + b_K . q0 / sqrt(d_h)      (score of key j; s_j = s0_j + u_s.delta_j)
    u_w = W_V c,                w0_j = z_j . u_w + b_V . c                   (value of token j; w_j = w0_j +
    u_w.delta_j)

`HeadEnclosure` holds flint `arb` balls that contain these exact numbers (precision `PREC` bits; a float64
converts exactly). Products go through `arb_mat` (each entry a ball; the enclosure is rigorous).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from flint import arb, arb_mat

from attncert.head.rounding import gamma

_BILINEAR: dict = {}  # per head's (W_Q, W_K), norm and bilinear scalings

PREC = 128  # bits of the ball arithmetic (float64 data convert exactly)


def as_mat(a: np.ndarray) -> arb_mat:
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    return arb_mat(a.tolist())


def column(m: arb_mat) -> list:
    """The entries of a one-column or one-row arb_mat as a list of balls."""
    return [m[i, j] for i in range(m.nrows()) for j in range(m.ncols())]


def norm_bound(balls: list, norm: str) -> arb:
    """A ball containing the dual norm (l1 for the box, l2 for the ball) of an exact vector given as balls."""
    if norm == "linf":
        return sum((abs(x) for x in balls), arb(0))
    return sum((x * x for x in balls), arb(0)).sqrt()


def spectral_bound(W_Q: np.ndarray | arb_mat, W_K: np.ndarray | arb_mat) -> arb:
    """A ball whose upper end bounds ||W_Q W_K^T||_2 = sqrt(lambda_max(G_Q G_K)), G = W^T W (d_h x d_h); W_Q, W_K
    float64 arrays (exact balls) or ball matrices (the bound then holds for every matrix in the balls).

    With V the float64 eigenvectors of G_Q G_K, Y = V^{-1} (G_Q G_K) V (computed in balls, V^{-1} enclosed) is
    similar to G_Q G_K and nearly diagonal; by Gershgorin every eigenvalue lies in a disc
    |lambda - Y_ii| <= sum_{j != i} |Y_ij|, so lambda_max <= max_i (Re Y_ii + radius_i).
    """
    Q = W_Q if isinstance(W_Q, arb_mat) else as_mat(W_Q)
    K = W_K if isinstance(W_K, arb_mat) else as_mat(W_K)
    G = (Q.transpose() * Q) * (K.transpose() * K)
    Gf = np.array([[float(G[i, j].mid()) for j in range(G.ncols())] for i in range(G.nrows())])
    _, V = np.linalg.eig(Gf)
    V = np.real(V) if np.all(np.isreal(V)) else np.linalg.svd(Gf)[0]
    Vm = as_mat(V)
    Y = Vm.inv() * G * Vm
    k = Y.nrows()
    top = max(float((Y[i, i] + sum((abs(Y[i, j]) for j in range(k) if j != i), arb(0))).upper()) for i in range(k))
    return arb(max(top, 0.0)).sqrt()


SCALING_FIELDS = ("scale_q", "scale_k")  # a linf varying row's first_order part: the bilinear bound's scalings


def scaling_defect(scalings, d: int) -> str:
    """'' when `scalings` = (s, t) are two positive finite float vectors of length d, else what is wrong (the
    diagonal bilinear bound of a linf varying row needs them; any such pair gives a valid bound)."""
    if scalings is None:
        return f"no stored bilinear scalings ({', '.join(SCALING_FIELDS)})"
    for name, v in zip(SCALING_FIELDS, scalings):
        v = np.asarray(v)
        if v.shape != (d,) or not np.issubdtype(v.dtype, np.floating):
            return f"bilinear scaling {name} of shape {v.shape} ({v.dtype}), expected ({d},) float"
        if not np.all(np.isfinite(v)):
            return f"bilinear scaling {name} not finite"
        if not np.all(v > 0):
            return f"bilinear scaling {name} not positive"
    return ""


def diagonal_bound(W_Q: np.ndarray, W_K: np.ndarray, s: np.ndarray, t: np.ndarray) -> arb:
    """A ball whose upper end bounds max_{|x|, |y| <= 1} x W_Q W_K^T y^T by ||s^-1||_2 ||t^-1||_2 ||(S W_Q)(T W_K)^T||_2
    (S = diag(s), T = diag(t), any s, t > 0: x M y^T = (x S^-1)(S W_Q)(T W_K)^T (T^-1 y^T)). The scaled weights are
    products of two floats, exact in `PREC` bits."""
    def scaled(W, v):
        return arb_mat([[arb(float(a)) * arb(float(w)) for w in row] for a, row in zip(v, W.tolist())])

    def inverse_norm(v):
        return sum((1 / (arb(float(a)) * arb(float(a))) for a in v), arb(0)).sqrt()

    return inverse_norm(s) * inverse_norm(t) * spectral_bound(scaled(W_Q, s), scaled(W_K, t))


def array_key(a) -> tuple:
    """A memo key of an array's exact contents (dtype, shape, bytes): equal keys, equal floats."""
    a = np.asarray(a)
    return a.dtype.str, a.shape, a.tobytes()


class LayerFiles:
    """The extracted arrays and specification vectors of one layer (read once; checked by the caller)."""

    def __init__(self, extract_npz: str | Path, spec_npz: str | Path):
        with np.load(extract_npz, allow_pickle=False) as f:
            self.arrays = {k: f[k] for k in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "Z", "causal")}
        with np.load(spec_npz, allow_pickle=False) as f:
            self.spec, self.query_positions = f["c"], [int(q) for q in f["query_positions"]]
        self._heads: dict = {}
        self._balls: dict = {}  # the weights' and tokens' balls, shared by the units that read them

    def unit_of(self, row: dict) -> "HeadEnclosure":
        """The unit of a row of the certification table."""
        return self.unit(int(row["head"]), int(row["prompt"]), int(row["query_pos"]))

    def unit(self, head: int, prompt: int, query_pos: int) -> "HeadEnclosure":
        key = (head, prompt, query_pos)
        if key not in self._heads:
            a = self.arrays
            if not 0 <= head < a["W_Q"].shape[0]:
                raise ValueError(f"head {head} out of range for {a['W_Q'].shape[0]} heads")
            Z = a["Z"][prompt]
            Z0 = Z[:query_pos + 1] if bool(a["causal"]) else Z
            c = self.spec[head, prompt, self.query_positions.index(query_pos)]
            self._heads[key] = HeadEnclosure(a["W_Q"][head], a["W_K"][head], a["W_V"][head], a["b_Q"][head],
                                             a["b_K"][head], a["b_V"][head], Z0, query_pos, c
                                             ).share_balls(self._balls, head, (prompt, query_pos))
        return self._heads[key]


@dataclass
class HeadEnclosure:
    """Balls around the exact fixed-query reduction of one (head, prompt, query) from its float64 data."""

    W_Q: np.ndarray
    W_K: np.ndarray
    W_V: np.ndarray
    b_Q: np.ndarray
    b_K: np.ndarray
    b_V: np.ndarray
    Z0: np.ndarray
    query_index: int
    c: np.ndarray

    @property
    def n(self) -> int:
        return self.Z0.shape[0]

    def memo(self, key: tuple, compute):
        """compute() once per key for this unit: the rows of a unit (its radii, modes) share the balls their checks
        derive from the same inputs (key: what the balls depend on, arrays by `array_key`), computed as before."""
        store = self.__dict__.setdefault("_memo", {})
        if key not in store:
            store[key] = compute()
        return store[key]

    def exact_norm(self, name: str, norm: str) -> arb:
        """norm_bound of the exact vector `name` (u_s or u_w), once per unit and norm."""
        return self.memo(("exact_norm", name, norm), lambda: norm_bound(getattr(self, name), norm))

    def float_norm(self, a, norm: str) -> arb:
        """norm_bound of the float vector a (each float an exact ball), once per distinct a and norm."""
        return self.memo(("float_norm", norm, array_key(a)), lambda: norm_bound([arb(float(x)) for x in a], norm))

    def difference_norm(self, a, name: str, norm: str) -> arb:
        """norm_bound of a - the exact vector `name` (u_s or u_w) entrywise, a in floats, once per distinct a."""
        return self.memo(("difference_norm", name, norm, array_key(a)),
                         lambda: norm_bound([arb(float(x)) - b for x, b in zip(a, getattr(self, name))], norm))

    @cached_property
    def sqrt_dh(self) -> arb:
        return arb(self.W_Q.shape[1]).sqrt()

    @cached_property
    def W_Q_balls(self) -> arb_mat:  # (d, d_h), exact (float64 converts exactly): built once per unit
        return as_mat(self.W_Q)

    @cached_property
    def W_K_balls(self) -> arb_mat:
        return as_mat(self.W_K)

    @cached_property
    def W_V_balls(self) -> arb_mat:
        return as_mat(self.W_V)

    @cached_property
    def Z0_balls(self) -> arb_mat:  # (n, d): the nominal tokens
        return as_mat(self.Z0)

    def share_balls(self, pool: dict, head_key, tokens_key) -> "HeadEnclosure":
        """Take the exact balls of the head's weights (keyed by head_key) and of the tokens (by tokens_key) from
        `pool`, converting them on first use: the units of one head, or of one token set, convert the same floats."""
        for name in ("W_Q_balls", "W_K_balls", "W_V_balls", "b_Q_balls", "b_K_balls", "Z0_balls"):
            key = (name, tokens_key if name == "Z0_balls" else head_key)
            if key in pool:
                self.__dict__[name] = pool[key]
            else:
                pool[key] = getattr(self, name)
        return self

    @cached_property
    def b_Q_balls(self) -> arb_mat:  # (1, d_h)
        return as_mat(self.b_Q)

    @cached_property
    def b_K_balls(self) -> arb_mat:  # (1, d_h)
        return as_mat(self.b_K)

    @cached_property
    def keys(self) -> arb_mat:  # (n, d_h): k0*_j = z_j W_K + b_K, the nominal keys
        return self.Z0_balls * self.W_K_balls + arb_mat([self.b_K.tolist()] * self.n)

    @cached_property
    def q0(self) -> arb_mat:  # (1, d_h)
        return as_mat(self.Z0[self.query_index]) * self.W_Q_balls + self.b_Q_balls

    @cached_property
    def u_s(self) -> list:
        return [x / self.sqrt_dh for x in column(self.W_K_balls * self.q0.transpose())]

    @cached_property
    def s0(self) -> list:
        bq = column(self.b_K_balls * self.q0.transpose())[0] / self.sqrt_dh
        return [x + bq for x in column(self.Z0_balls * arb_mat([[x] for x in self.u_s]))]

    @cached_property
    def u_w(self) -> list:
        return column(self.W_V_balls * as_mat(self.c).transpose())

    @cached_property
    def bias_value(self) -> arb:
        """b_V . c: the value every token reads from the bias."""
        return column(as_mat(self.b_V) * as_mat(self.c).transpose())[0]

    @cached_property
    def w0(self) -> list:
        return [x + self.bias_value for x in column(self.Z0_balls * arb_mat([[x] for x in self.u_w]))]

    def key_query_directions(self) -> list:
        """p*_j = W_Q k0_j / sqrt(d_h) per token j (k0_j = z_j W_K + b_K), as lists of balls (the query's direction
        in key j's score)."""
        if not hasattr(self, "_p"):
            M = self.W_Q_balls * self.keys.transpose()  # (d, n)
            self._p = (M / self.sqrt_dh).transpose().tolist()  # entrywise arb division, as M[a, j] / sqrt(d_h)
        return self._p

    def entry_sum_bound(self) -> arb:
        """An upper bound on sum_ab |(W_Q W_K^T)_ab| (the bilinear form's maximum over the unit box): the float64
        sum plus its a-priori error bound (each entry errs by <= gamma_{d_h} (|W_Q| |W_K|^T)_ab, the sum of the
        d^2 magnitudes by gamma_{d^2} times itself)."""
        key = (hashlib.sha256(self.W_Q.tobytes() + self.W_K.tobytes()).hexdigest(), "entry")
        if key not in _BILINEAR:
            d, dh = self.W_Q.shape
            M = np.abs(self.W_Q @ self.W_K.T)
            err = (np.abs(self.W_Q) @ np.abs(self.W_K).T) * gamma(dh + 2)
            total = float(M.sum()) + float(err.sum())
            _BILINEAR[key] = arb(total) * arb(1.0 + 2.0 * gamma(d * d + dh + 4))
        return _BILINEAR[key]

    def key_query_norms(self, norm: str) -> list:
        """||W_Q k0_j||_* per key j: the query's reach into key j's score (sqrt(d_h) ||p*_j||_*)."""
        return self.memo(("key_query_norms", norm),
                         lambda: [norm_bound(p, norm) * self.sqrt_dh for p in self.key_query_directions()])

    def bilinear_bound(self, norm: str, scalings: tuple | None = None) -> arb:
        """An upper bound on beta = max_{||x||, ||y|| <= 1} x W_Q W_K^T y^T.

        l2: ||W_Q W_K^T||_2. linf (x, y in the unit box): the smallest of sum_ab |(W_Q W_K^T)_ab|
        (`entry_sum_bound`), sum_h ||W_Q[:, h]||_1 ||W_K[:, h]||_1, d ||W_Q W_K^T||_2 (||x||_2 <= sqrt(d) for both)
        and, with scalings = (s, t) (positive finite, length d:
        `scaling_defect`; the caller checks them), the diagonally scaled `diagonal_bound`.
        """
        key = None if scalings is None else tuple(array_key(np.asarray(v, dtype=np.float64)) for v in scalings)
        return self.memo(("bilinear", norm, key), lambda: self._shared_bilinear_bound(norm, scalings, key))

    def _shared_bilinear_bound(self, norm: str, scalings, key) -> arb:
        digest = hashlib.sha256(self.W_Q.tobytes() + self.W_K.tobytes())
        if key is not None:
            for part in key:
                digest.update(repr(part[:2]).encode() + part[2])
        key = (digest.hexdigest(), norm, key is not None)
        if key not in _BILINEAR:
            _BILINEAR[key] = self._bilinear_bound(norm, scalings)
        return _BILINEAR[key]

    def _bilinear_bound(self, norm: str, scalings) -> arb:
        spec = spectral_bound(self.W_Q_balls, self.W_K_balls)
        if norm == "l2":
            return spec
        cols = arb(0)
        for h in range(self.W_Q.shape[1]):
            cols += norm_bound([arb(x) for x in self.W_Q[:, h]], norm) * norm_bound([arb(x) for x in self.W_K[:, h]],
                                                                                    norm)
        bounds = [self.entry_sum_bound(), cols, arb(self.W_Q.shape[0]) * spec]
        if scalings is not None and norm == "linf":
            bounds.append(diagonal_bound(self.W_Q, self.W_K, *(np.asarray(v, dtype=np.float64) for v in scalings)))
        return min(bounds, key=lambda b: float(b.upper()))

    def value(self, Z: np.ndarray, mode: str) -> arb:
        """g(Z) = c . sum_j a_j v_j in ball arithmetic (fixed query: q at the nominal tokens), the scores as
        s_j = (z_j W_K + b_K) . q / sqrt(d_h) = z_j . (W_K q) / sqrt(d_h) + b_K . q / sqrt(d_h) (d + d_h products
        per key instead of d d_h)."""
        Zm = as_mat(Z)
        q = self.q0 if mode == "fixed" else as_mat(Z[self.query_index]) * self.W_Q_balls + self.b_Q_balls
        kq = self.W_K_balls * q.transpose()  # (d, 1)
        bq = column(self.b_K_balls * q.transpose())[0]
        s = [(x + bq) / self.sqrt_dh for x in column(Zm * kq)]
        w = [x + self.bias_value for x in column(Zm * arb_mat([[x] for x in self.u_w]))]
        top = max(float(x.mid()) for x in s)
        e = [(x - top).exp() for x in s]
        return sum((ej * wj for ej, wj in zip(e, w)), arb(0)) / sum(e, arb(0))
