"""Floating-point error arithmetic shared by every sound bound of the package (one source).

Model (Higham, *Accuracy and Stability of Numerical Algorithms*, ch. 3): each float64 operation
returns fl(x op y) = (x op y)(1 + e), |e| <= u = 2^-53. A chain of k such operations errs by at most

    gamma_k = k u / (1 - k u)

relative to the same chain on absolute values (e.g. a dot product of length k: |fl(x.y) - x.y| <=
gamma_k |x|.|y|). `gamma_ld` is the same bound for x87 extended precision (u_L = 2^-64 on x86-64
Linux; where long double is plain double it is 2^-53 and every bound stays valid, only looser).

Outward rounding: a bound computed in floating point is moved up (`round_up`, a few ulps toward +inf)
and, for an affine change of units v = origin + scale * bound (`outward_affine`), padded by the
rounding of the product and the sum before the step up, so that the float result is never below the
real one.
"""
from __future__ import annotations

import math

import numpy as np

UNIT_ROUNDOFF = 2.0 ** -53
LD = np.longdouble
LD_ROUNDOFF = float(np.finfo(LD).eps) / 2


def gamma(k: float, u: float = UNIT_ROUNDOFF) -> float:
    """Higham's gamma_k = k u / (1 - k u): relative error bound of k chained float operations."""
    ku = k * u
    return ku / (1.0 - ku)


def gamma_ld(k: float) -> float:
    """gamma_k for extended (long double) precision."""
    return gamma(k, LD_ROUNDOFF)


def round_up(x: float, ulps: int = 4) -> float:
    """x stepped `ulps` representable numbers toward +inf."""
    for _ in range(ulps):
        x = math.nextafter(x, math.inf)
    return x


def outward_affine(origin: float, scale: float, bound: float, tiny: float = 0.0) -> float:
    """A float >= origin + scale * bound (+ tiny) in real arithmetic; +inf for a non-finite bound.

    `tiny` is an absolute term the caller adds for effects below the float range (e.g. exponentials
    that underflowed to 0).
    """
    if not math.isfinite(bound):
        return math.inf
    val = origin + scale * bound
    val += 4.0 * UNIT_ROUNDOFF * (abs(origin) + abs(scale * bound)) + tiny
    return math.nextafter(val, math.inf)
