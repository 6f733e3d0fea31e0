"""The weak-duality bound of a stored conic program and dual vector, recomputed without a solver.

Program (objective units): maximize -c.x over x in [lo, hi] with b - A x in K. For z in K^*, z.(b - A x) >= 0,
so for every such x

    -c.x <= -c.x + z.(b - A x) = z.b + g.x <= z.b + sum_i max(g_i lo_i, g_i hi_i),     g = -(c + A^T z).   (WD)

The box [lo, hi] contains every lifted true point (docs/certificate.md); the program's data are float64 images
of the real relaxation with relative error <= data_rel_err per entry, which adds
data_rel_err (|z|.(|A| m + |b|) + |c|.m), m_i = max(|lo_i|, |hi_i|) (the stored model of the certificate).

Arithmetic. A^T z is formed in float64 with its a-priori error bound gamma_{k+2} (|c| + |A|^T |z|) (k nonzeros in
the column; Higham, Accuracy and Stability, ch. 3: IEEE round to nearest); each g_i is then a ball of that
radius, and every other step -- the products with the box, z.b and the sums -- is done in flint ball
arithmetic. The result is a ball whose upper end bounds (WD) over the real numbers.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from flint import arb

from attncert.head.rounding import gamma


def weak_duality_upper(c: np.ndarray, A: sp.spmatrix, b: np.ndarray, z: np.ndarray, lo: np.ndarray,
                       hi: np.ndarray, data_rel_err: float) -> arb:
    """A ball whose upper end bounds (WD) for the stored program and dual (z must be in K^*: `dual_cone`)."""
    A = sp.csc_matrix(A)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo <= hi)):
        return arb("+inf")
    absA = abs(A)
    g = -(c + A.T @ z)
    k = np.diff(A.indptr).astype(np.float64)
    err = gamma(k + 2.0) * (np.abs(c) + absA.T @ np.abs(z)) * (1.0 + 1e-6) + 1e-300
    total = arb(0)
    for gi, ei, l, h in zip(g.tolist(), err.tolist(), lo.tolist(), hi.tolist()):
        ball = arb(gi, ei)
        total += max(ball * l, ball * h, key=lambda x: float(x.upper())).upper() if l != h else ball * l
    for i in np.flatnonzero(b):
        total += arb(float(z[i])) * arb(float(b[i]))
    mag = np.maximum(np.abs(lo), np.abs(hi))
    rounding = float(np.abs(z) @ (absA @ mag + np.abs(b)) + np.abs(c) @ mag)
    total += arb(data_rel_err) * arb(rounding) * arb(1.0 + 1e-6)
    return total if math.isfinite(float(total.upper())) else arb("+inf")
