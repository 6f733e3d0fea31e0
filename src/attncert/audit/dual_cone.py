"""Is a stored dual vector in the dual cone K^*? Checked in ball arithmetic.

Rows are ordered as the solver's conic data: `zero` free rows, `nonneg` rows, the second-order cones, the
exponential cones (dims = [zero, nonneg, exp, soc sizes...] in the certificate file). K^* is

    zero: any z;    nonneg: z >= 0;    SOC (t, y): t >= ||y||_2;
    exponential (K_exp = cl{(x, y, w): y > 0, y e^{x/y} <= w}): K_exp^* = cl{(u, v, w): u < 0, -u e^{v/u - 1} <= w}
                    (the closure adds u = 0, v >= 0, w >= 0).

`dual_cone_margin` returns the smallest margin over all blocks (>= 0: z in K^*), and where it occurs.
"""
from __future__ import annotations

import math

import numpy as np
from flint import arb


def cone_blocks(dims: np.ndarray):
    """(kind, start, end) of every block, in row order."""
    zero, nonneg, n_exp, soc = int(dims[0]), int(dims[1]), int(dims[2]), [int(q) for q in dims[3:]]
    out, k = [], 0
    if zero:
        out.append(("zero", 0, zero))
        k = zero
    if nonneg:
        out.append(("nonneg", k, k + nonneg))
        k += nonneg
    for q in soc:
        out.append(("soc", k, k + q))
        k += q
    for _ in range(n_exp):
        out.append(("exp", k, k + 3))
        k += 3
    return out, k


def dual_cone_margin(z: np.ndarray, dims: np.ndarray) -> tuple[float, str]:
    """(smallest margin, where): margin >= 0 in every block iff z in K^* (a lower bound from ball arithmetic)."""
    blocks, m = cone_blocks(dims)
    if m != z.size:
        return -math.inf, f"dual has {z.size} rows, the cones {m}"
    if not np.all(np.isfinite(z)):
        return -math.inf, "non-finite dual entry"
    worst, where = math.inf, ""
    for kind, a, e in blocks:
        if kind == "zero":
            continue
        if kind == "nonneg":
            i = int(np.argmin(z[a:e]))
            margin = float(z[a + i])
            label = f"row {a + i} (nonnegative)"
        elif kind == "soc":
            t = arb(float(z[a]))
            margin = float((t - sum((arb(float(y)) ** 2 for y in z[a + 1:e]), arb(0)).sqrt()).lower())
            label = f"rows {a}-{e - 1} (second-order cone)"
        else:
            u, v, w = (arb(float(x)) for x in z[a:e])
            if float(z[a]) < 0:
                margin = float((w + u * (v / u - 1).exp()).lower())
            elif float(z[a]) == 0:
                margin = min(float(z[a + 1]), float(z[a + 2]))
            else:
                margin = -float(z[a])
            label = f"rows {a}-{e - 1} (exponential cone)"
        if margin < worst:
            worst, where = margin, label
    return worst, where
