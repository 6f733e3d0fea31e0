"""The end-point bounds of exp, 1/z and z^(-1/2) (block.enclosure.taylor_excess_at_ends, slope_change_at_ends) and the
audit's numpy mirror: sound against the excess evaluated in 60-digit arithmetic at points of the range, tighter than
the derivative bounds where the range nears the singularity, +inf where it reaches it, in both."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncert.audit import block_curves
from attncert.block.enclosure import curve_bounds, slope_change_at_ends, taylor_excess_at_ends
from attncert.block.map import DTYPE, EXP, GELU_ERF, RECIPROCAL, RSQRT, SQUARE

mpmath.mp.dps = 60
CURVES = {"exp": (EXP, mpmath.exp), "reciprocal": (RECIPROCAL, lambda z: 1 / z),
          "rsqrt": (RSQRT, lambda z: 1 / mpmath.sqrt(z))}


def _excess(fn, c, z, order):
    """phi(z) - T_order(z) at c, exactly enough (mpmath derivatives of the closed form)."""
    c, z = mpmath.mpf(c), mpmath.mpf(z)
    D = z - c
    T = sum(mpmath.diff(fn, c, k) * D ** k / math.factorial(k) for k in range(order + 1))
    return fn(z) - T


def _slope(fn, c, z):
    return mpmath.diff(fn, mpmath.mpf(z)) - mpmath.diff(fn, mpmath.mpf(c))


@settings(max_examples=60)
@given(name=st.sampled_from(sorted(CURVES)), log_c=st.floats(-3, 2), rel_w=st.floats(1e-6, 1.5),
       t=st.floats(-1.0, 1.0), order=st.sampled_from([1, 3]), floored=st.booleans())
def test_end_point_bounds_hold_inside_the_range(name, log_c, rel_w, t, order, floored):
    curve, fn = CURVES[name]
    c = 10.0 ** log_c if name != "exp" else 3.0 * log_c
    w = rel_w * abs(c) if name != "exp" else rel_w * 4.0
    floor = 0.5 * c if floored and name != "exp" else None
    ct, wt = torch.tensor([c], dtype=DTYPE), torch.tensor([w], dtype=DTYPE)
    bound = float(taylor_excess_at_ends(curve, ct, wt, floor, order)[0])
    slope = float(slope_change_at_ends(curve, ct, wt, floor)[0])
    lo = c - w if floor is None else max(c - w, floor)
    if name != "exp" and lo <= 0:
        assert bound == math.inf and slope == math.inf
        return
    z = lo + (t + 1.0) / 2.0 * (c + w - lo)
    assert abs(_excess(fn, c, z, order)) <= bound
    assert abs(_slope(fn, c, z)) <= slope
    # the audit's mirror: sound on its own, and never above the stage's (its rounding allowance is 8 units, not 16)
    mirror = block_curves.taylor_excess_at_ends(name, np.array([c]), np.array([w]), floor, order)[0]
    assert abs(_excess(fn, c, z, order)) <= mirror <= bound
    assert abs(_slope(fn, c, z)) <= block_curves.slope_change_at_ends(name, np.array([c]), np.array([w]), floor)[0]


def test_end_points_are_tighter_than_the_derivative_bound_near_the_singularity():
    c, w = torch.tensor([1.0], dtype=DTYPE), torch.tensor([0.68], dtype=DTYPE)
    m2, _ = curve_bounds(RECIPROCAL, c, w)
    ends = taylor_excess_at_ends(RECIPROCAL, c, w, None, 1)
    assert float(ends) < 0.2 * float(0.5 * m2 * w * w)              # 1.45 against 14.3
    z = 1.0 - 0.68
    assert float(ends) >= 1 / z - 1 + (z - 1)                        # attained at the left end


def test_other_curves_and_a_range_through_zero():
    c, w = torch.tensor([0.5], dtype=DTYPE), torch.tensor([1.0], dtype=DTYPE)
    assert taylor_excess_at_ends(SQUARE, c, w, None, 1) is None
    assert slope_change_at_ends(GELU_ERF, c, w, None) is None
    assert block_curves.taylor_excess_at_ends("gelu", np.array([0.5]), np.array([1.0]), None, 3) is None
    assert float(taylor_excess_at_ends(RSQRT, c, w, None, 3)) == math.inf
    assert float(taylor_excess_at_ends(RSQRT, c, w, 0.25, 3)) < math.inf      # clipped at the domain floor
    assert block_curves.slope_change_at_ends("reciprocal", np.array([0.5]), np.array([1.0]), None)[0] == math.inf
