"""Exact line search on the free duals: a lower weak-duality bound from the same solve, one equality row at a time.

Problem. For a program min c.x s.t. A x + s = b, s in K, the dual z_r of a row r of the zero cone (s_r = 0) is free:
any value keeps z in K^*. Weak duality over a box X = [lo, hi] (`weak_duality.weak_duality_bound`) bounds
max_{x in X, feasible} -c.x by

    B(z) = z.b + sum_i phi_i(g_i),    g = -(c + A^T z),    phi_i(y) = max(y lo_i, y hi_i),

so an interior-point solver's dual pays its stationarity residual g_i at the width of column i's box. Moving z_r by
delta changes g_i by -delta A_ri on the row's columns and z.b by delta b_r:

    B(z + delta e_r) = B(z) + delta b_r + sum_{i: A_ri != 0} [phi_i(g_i - delta A_ri) - phi_i(g_i)],

convex and piecewise linear in delta, with a kink at delta_i = g_i / A_ri per column. Its slope at -infinity is
b_r - sum_{A_ri > 0} A_ri hi_i - sum_{A_ri < 0} A_ri lo_i and rises by |A_ri| (hi_i - lo_i) at each kink, so the
minimizer is the first kink, in increasing order, at which the slope turns nonnegative (a weighted median).
`shift_free_duals` takes the given rows one after the other (one pass of exact coordinate descent).

It only chooses z: `smaller_bound` bounds the result by `weak_duality_bound`, outward rounded as for any z, and
keeps the smaller of the two bounds. Where it matters: a column with a wide box and a residual that one equality row
can move onto narrow columns, such as the slack s of a moment cut of the query's shift
(`varying_query.long_program`: s = Lambda' tau - sum_j w_j Q_j, box [0, Lambda_plain tau_hi]; on a 256-key MiniLM
unit Lambda_plain = 34,445 and 965 against Lambda' = 78.5 and 2.26).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.dual_bound.data_error import DATA_REL_ERR
from attncert.certify.second_order.dual_bound.weak_duality import weak_duality_bound


def line_minimizer(g: np.ndarray, a: np.ndarray, lo: np.ndarray, hi: np.ndarray, b_r: float) -> float:
    """The delta minimizing delta b_r + sum_i phi_i(g_i - delta a_i) (module docstring); 0 when the minimum is not
    attained at a finite kink (a row that cannot lower the bound) or the data are not finite."""
    keep = a != 0
    g, a, lo, hi = g[keep], a[keep], lo[keep], hi[keep]
    if a.size == 0:
        return 0.0
    kinks = g / a
    order = np.argsort(kinks, kind="stable")
    slope0 = b_r - float(np.sum(np.where(a > 0, a * hi, a * lo)))
    slopes = slope0 + np.cumsum((np.abs(a) * (hi - lo))[order])
    if not (np.isfinite(slope0) and slope0 < 0 and np.isfinite(slopes[-1]) and slopes[-1] > 0):
        return 0.0
    delta = float(kinks[order[int(np.argmax(slopes >= 0))]])
    return delta if np.isfinite(delta) else 0.0


def shift_free_duals(c: np.ndarray, A: sp.spmatrix, b: np.ndarray, z: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                     rows) -> np.ndarray:
    """z with each zero-cone row of `rows`, in that order, moved to its exact line minimizer (module docstring).
    The rows must be rows of the zero cone (a free dual); the other entries of z are returned unchanged."""
    Ar = sp.csr_matrix(A)
    z = np.array(z, dtype=np.float64)
    g = -(np.asarray(c, dtype=np.float64) + Ar.T @ z)
    for r in rows:
        start, end = Ar.indptr[r], Ar.indptr[r + 1]
        cols, a = Ar.indices[start:end], Ar.data[start:end]
        delta = line_minimizer(g[cols], a, lo[cols], hi[cols], float(b[r]))
        if delta != 0.0:
            z[r] += delta
            g[cols] -= delta * a
    return z


def smaller_bound(c: np.ndarray, A: sp.spmatrix, b: np.ndarray, dims, z: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                  rows=None, data_rel_err: float = DATA_REL_ERR) -> tuple[float, np.ndarray]:
    """(bound, repaired z): the smaller of `weak_duality_bound` for the solver's z and for z with the free duals of
    `rows` (default: every zero-cone row, in order) line-searched."""
    bound, zr = weak_duality_bound(c, A, b, dims, z, lo, hi, data_rel_err)
    rows = range(dims.zero) if rows is None else rows
    shifted, zs = weak_duality_bound(c, A, b, dims, shift_free_duals(c, A, b, zr, lo, hi, rows), lo, hi, data_rel_err)
    return (shifted, zs) if shifted < bound else (bound, zr)
