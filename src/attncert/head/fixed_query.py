"""The fixed-query reduction: with the query held at its nominal value each token enters the head
through two numbers only (one source for every solver of the package).

For token j with perturbation delta_j (q = z_i W_Q + b_Q fixed):

    s_j = s0_j + u_s . delta_j,    u_s = W_K q / sqrt(d_h),   s0_j = z_j . u_s + b_K . q / sqrt(d_h)
    w_j = w0_j + u_w . delta_j,    u_w = W_V c,              w0_j = z_j . u_w + b_V . c

(u_s, u_w the same for every token). `fixed_query_reduction` evaluates the chain in extended precision
(`rounding.LD`) and rounds once to float64, with elementwise bounds on |computed - exact|:
gamma^L_k times the same chain on absolute values (k the chain length) plus u |result| for the final
rounding, doubled because the absolute-value products are themselves float64 (relative error < 1e-12).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncert.head.problem import cached_by_weights
from attncert.head.rounding import LD, UNIT_ROUNDOFF, gamma_ld


@dataclass
class FixedQueryReduction:
    """s_j = s0_j + u_s . delta_j, w_j = w0_j + u_w . delta_j, with elementwise error bounds."""

    s0: np.ndarray  # (n,)
    w0: np.ndarray  # (n,)
    u_s: np.ndarray  # (d,)
    u_w: np.ndarray  # (d,)
    err_s0: np.ndarray  # (n,) |computed - exact|
    err_w0: np.ndarray
    err_us: np.ndarray  # (d,)
    err_uw: np.ndarray
    # the same chain on absolute values (float64): |z_i| |W_Q| + |b_Q|, |W_K| q_abs / sqrt(d_h), |W_V| |c|
    q_abs: np.ndarray | None = None  # (d_h,)
    us_abs: np.ndarray | None = None  # (d,)
    uw_abs: np.ndarray | None = None  # (d,)

    def directions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(s0, w0, u_s, u_w)."""
        return self.s0, self.w0, self.u_s, self.u_w


def fixed_query_reduction(problem) -> FixedQueryReduction:
    """The two directions per token of a `HeadProblem` (any mode: the query is taken at Z0).

    It does not depend on the radius, the norm or the mode: shared by the units of the same head, tokens, query and
    specification (cached by the arrays' contents); the returned arrays are read-only.
    """
    return _reduction(problem.W_Q, problem.W_K, problem.W_V, problem.b_Q, problem.b_K, problem.b_V, problem.Z0,
                      problem.c, int(problem.query_index))


@cached_by_weights(arrays=3, maxsize=12)
def _long_double(W_Q, W_K, W_V) -> tuple:
    """The head's weights in extended precision (float64 converts exactly), shared by its units."""
    out = tuple(W.astype(LD) for W in (W_Q, W_K, W_V))
    for W in out:
        W.flags.writeable = False
    return out


@cached_by_weights(arrays=8, maxsize=16)
def _reduction(W_Q, W_K, W_V, b_Q, b_K, b_V, Z0, c, i: int) -> FixedQueryReduction:
    d, dh = W_Q.shape
    WQ, WK, WV = _long_double(W_Q, W_K, W_V)
    Z = Z0.astype(LD)
    cL = c.astype(LD)
    q = Z[i] @ WQ + b_Q.astype(LD)
    sq = np.sqrt(LD(dh))
    us = (WK @ q) / sq
    s0 = Z @ us + (b_K.astype(LD) @ q) / sq
    uw = WV @ cL
    w0 = Z @ uw + b_V.astype(LD) @ cL
    out = [np.asarray(x, dtype=np.float64) for x in (s0, w0, us, uw)]
    absZ = np.abs(Z0)
    q_abs = np.abs(Z0[i]) @ np.abs(W_Q) + np.abs(b_Q)
    us_abs = np.abs(W_K) @ q_abs / np.sqrt(dh)
    uw_abs = np.abs(W_V) @ np.abs(c)
    u = UNIT_ROUNDOFF
    err_us = 2 * gamma_ld(d + dh + 4) * us_abs + u * np.abs(out[2])
    err_uw = 2 * gamma_ld(dh + 1) * uw_abs + u * np.abs(out[3])
    err_s0 = 2 * gamma_ld(2 * d + dh + 8) * (absZ @ us_abs + np.abs(b_K) @ q_abs / np.sqrt(dh)) \
        + u * np.abs(out[0])
    err_w0 = 2 * gamma_ld(d + dh + 4) * (absZ @ uw_abs + np.abs(b_V) @ np.abs(c)) \
        + u * np.abs(out[1])
    arrays = (*out, err_s0, err_w0, err_us, err_uw, q_abs, us_abs, uw_abs)
    for a in arrays:
        a.flags.writeable = False
    return FixedQueryReduction(*arrays)
