"""The block map's scalar curves and sound bounds of their derivatives, in numpy (the audit's own implementation; the
stage's is `block/map.py`, `block/enclosure.py` and `block/taylor_model.py`, in torch).

Curves: square z^2, rsqrt z^(-1/2), exp, reciprocal 1/z, GELU (erf) and its tanh approximation (GPT-2's gelu_new).

* `range_bounds(name, c, w, floor)`: M2 >= sup |phi''| over [c - w, c + w] (the affine enclosure's): square 2, exp
  exp(c + w), rsqrt and reciprocal phi'' at the interval's left end (|phi''| decreases on z > 0; +inf if the
  interval reaches 0), GELU |phi''(c)| + K3 w;
* `third_derivative(name, c)`: |phi'''(c)| at the centre (the cubic Taylor model's coefficients): 0, exp(c),
  15/8 c^(-7/2), 6 / c^4, the GELUs' closed forms;
* `fourth_bound(name, c, w, floor)`: sup |phi''''| over [c - w, c + w] (the Taylor model's fourth-order rest): 0,
  exp(c + w), 105/16 lo^(-9/2) and 24 / lo^5 at the left end lo (+inf if it reaches 0), GELU K4.

K3 >= sup |phi'''| and K4 >= sup |phi''''| over the line: the sup of the derivative (closed form; the tanh GELU's
fourth a central difference, step 1e-4, of its closed-form third) on a grid of step 2e-4 over [-40, 40], times 1.2
(the derivatives are smooth and decay in the tails, so the grid misses at most a relative O(1e-8) of the sup; the
stage's constants are its own, times 1.25).

Rounding: numpy's exp, erf, tanh and power err by a few units of u = 2^-53; every value here is raised by
`FN_ULPS` units (8, half the stage's 16: both are generous). `inflate` raises a float sum of at most 10^6
nonnegative rounded terms to a bound of its exact value (gamma_{10^6} = 1.1e-10 < 2e-10).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

from attncert.head.rounding import UNIT_ROUNDOFF as U
from attncert.head.rounding import gamma

FN_ULPS = 8.0
INFLATE = 2e-10
_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_K = math.sqrt(2.0 / math.pi)
_A = 0.044715


def up(x, k: int):
    """An upper bound of the exact value of a nonnegative float expression of k rounded operations."""
    return x * (1.0 + gamma(k + 1)) + 1e-300


def inflate(x):
    """A float >= x in real arithmetic when x is a float sum of at most 10^6 nonnegative rounded products."""
    return x * (1.0 + INFLATE) + 1e-300


def _pdf(z):
    return _INV_SQRT_2PI * np.exp(-0.5 * z * z)


def _tanh_parts(z):
    """T = tanh(g), S = 1 - T^2 and g', g'', g''' for g = K (z + A z^3)."""
    T = np.tanh(_K * (z + _A * z ** 3))
    return T, 1.0 - T * T, _K * (1.0 + 3.0 * _A * z * z), 6.0 * _K * _A * z, 6.0 * _K * _A


def _tanh_d2(z):
    """phi'' = P + z P' / 2 with P = S g' (= T'), P' = S g'' - 2 T S g'^2."""
    T, S, g1, g2, _ = _tanh_parts(z)
    return S * g1 + 0.5 * z * (S * g2 - 2.0 * T * S * g1 * g1)


def _tanh_d3(z):
    """phi''' = 3 P' / 2 + z P'' / 2, P'' = S g''' - 6 T S g' g'' + (4 T^2 S - 2 S^2) g'^3."""
    T, S, g1, g2, g3 = _tanh_parts(z)
    P1 = S * g2 - 2.0 * T * S * g1 * g1
    P2 = S * g3 - 6.0 * T * S * g1 * g2 + (4.0 * T * T * S - 2.0 * S * S) * g1 ** 3
    return 1.5 * P1 + 0.5 * z * P2


def _tanh_d4(z, h=1e-4):
    return (_tanh_d3(z + h) - _tanh_d3(z - h)) / (2.0 * h)


# name -> (f, d1, d2, d3, d4)
CURVES = {
    "square": (lambda z: z * z, lambda z: 2.0 * z, lambda z: np.full_like(z, 2.0), None, None),
    "rsqrt": (lambda z: 1.0 / np.sqrt(z), lambda z: -0.5 * z ** -1.5, lambda z: 0.75 * z ** -2.5, None, None),
    "exp": (np.exp, np.exp, np.exp, None, None),
    "reciprocal": (lambda z: 1.0 / z, lambda z: -1.0 / (z * z), lambda z: 2.0 / z ** 3, None, None),
    "gelu": (lambda z: z * 0.5 * (1.0 + erf(z / _SQRT2)),
             lambda z: 0.5 * (1.0 + erf(z / _SQRT2)) + z * _pdf(z),
             lambda z: _pdf(z) * (2.0 - z * z),
             lambda z: _pdf(z) * (z ** 3 - 4.0 * z),
             lambda z: _pdf(z) * (-z ** 4 + 7.0 * z * z - 4.0)),
    "gelu_tanh": (lambda z: 0.5 * z * (1.0 + np.tanh(_K * (z + _A * z ** 3))),
                  lambda z: 0.5 * (1.0 + np.tanh(_K * (z + _A * z ** 3))) + 0.5 * z * _tanh_parts(z)[1]
                  * _tanh_parts(z)[2], _tanh_d2, _tanh_d3, _tanh_d4),
}
ACTIVATION_CURVE = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
_SUPS: dict = {}


def global_sups(name: str) -> tuple[float, float]:
    """(K3, K4) >= (sup |phi'''|, sup |phi''''|) over the real line, for the two GELUs."""
    if name not in _SUPS:
        z = np.linspace(-40.0, 40.0, 400001)
        _SUPS[name] = tuple(float(np.abs(CURVES[name][k](z)).max()) * 1.2 for k in (3, 4))
    return _SUPS[name]


def interval_bounds(name: str, c, w):
    """M2 >= sup |phi''| over [c - w, c + w] (elementwise, w >= 0)."""
    if name == "square":
        return np.full_like(w, 2.0)
    if name == "exp":
        return inflate(np.exp(c + w) * (1.0 + FN_ULPS * U))
    if name in ("rsqrt", "reciprocal"):
        low = (c - w) * (1.0 - 4 * U)
        pos = low > 0
        safe = np.where(pos, low, 1.0)
        m2 = 0.75 * safe ** -2.5 if name == "rsqrt" else 2.0 / safe ** 3
        return np.where(pos, inflate(m2 * (1 + FN_ULPS * U)), math.inf)
    k3, _ = global_sups(name)
    return inflate(np.abs(CURVES[name][2](c)) * (1 + FN_ULPS * U) + k3 * w) + 1e-300


def range_bounds(name: str, c, w, floor: float | None):
    """interval_bounds over [c - w, c + w] clipped below at `floor` (no true input lies below it)."""
    if floor is None:
        return interval_bounds(name, np.broadcast_to(c, w.shape), w)
    f = floor * (1.0 - 1e-9)
    if bool((c < f).any()):
        raise ValueError(f"{name}: a centre lies below the domain floor {floor}")
    lo = np.maximum(c - w, f)
    hi = np.maximum(c + w, lo)
    return interval_bounds(name, 0.5 * (lo + hi), inflate(0.5 * (hi - lo)))


def third_derivative(name: str, c):
    """|phi'''(c)| raised by its evaluation error (FN_ULPS units)."""
    if name == "square":
        return np.zeros_like(c)
    if name == "exp":
        v = np.exp(c)
    elif name == "rsqrt":
        v = 1.875 * c ** -3.5
    elif name == "reciprocal":
        v = 6.0 / c ** 4
    else:
        v = CURVES[name][3](c)
    return inflate(np.abs(v) * (1 + FN_ULPS * U))


def fourth_bound(name: str, c, w, floor: float | None):
    """sup |phi''''| over [c - w, c + w] (c (N,), w (B, N)), the left end clipped below at `floor`; +inf where the
    interval reaches a singularity."""
    if name == "square":
        return np.zeros_like(w)
    if name in ("gelu", "gelu_tanh"):
        return np.full_like(w, global_sups(name)[1])
    if name == "exp":
        return inflate(np.exp(c + w) * (1.0 + FN_ULPS * U))
    lo = c - w if floor is None else np.maximum(c - w, floor * (1.0 - 1e-9))
    low = lo * (1.0 - 4 * U)
    pos = low > 0
    safe = np.where(pos, low, 1.0)
    v = 6.5625 * safe ** -4.5 if name == "rsqrt" else 24.0 / safe ** 5
    return np.where(pos, inflate(v * (1 + FN_ULPS * U)), math.inf)


CONVEX = ("exp", "reciprocal", "rsqrt")     # phi'' > 0 and phi'''' > 0 on the domain


def _signed_d3(name: str, c):
    if name == "exp":
        return np.exp(c)
    return -1.875 * c ** -3.5 if name == "rsqrt" else -6.0 / c ** 4


def _end_points(name: str, c, w, floor: float | None):
    """(c, lo, hi, bad): lo <= c - w and hi >= c + w in float (lo clipped at `floor`); bad where lo <= 0 for 1/z and
    z^(-1/2) (lo replaced by c there; the caller's value is +inf)."""
    c, w = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(w, dtype=float))
    pad = 4 * U * (np.abs(c) + w)
    lo, hi = c - w - pad, c + w + pad
    if floor is not None:
        lo = np.maximum(lo, floor * (1.0 - 1e-9))
    bad = ~(lo > 0) if name != "exp" else np.zeros(lo.shape, dtype=bool)
    return c, np.where(bad, c, lo), hi, bad


def taylor_excess_at_ends(name: str, c, w, floor: float | None, order: int):
    """sup |phi(z) - T(z)| over [c - w, c + w] (clipped at `floor`) for exp, 1/z and z^(-1/2), T the Taylor polynomial
    of order 1 or 3 at c (phi^(order+1) > 0, so the excess is nonnegative and grows away from c: its sup is at an end
    point), raised by (FN_ULPS + 12) u of the terms' magnitudes; None for the other curves; +inf where lo <= 0."""
    if name not in CONVEX:
        return None
    c, lo, hi, bad = _end_points(name, c, w, floor)
    f, d1f, d2f = CURVES[name][:3]
    with np.errstate(all="ignore"):
        fc, d1, d2, d3 = f(c), d1f(c), d2f(c), _signed_d3(name, c)
        worst = np.zeros_like(c)
        for x in (lo, hi):
            D = x - c
            terms = [f(x), -fc, -d1 * D]
            if order == 3:
                terms += [-0.5 * d2 * D * D, -(d3 / 6.0) * D * D * D]
            worst = np.maximum(worst, sum(terms) + (FN_ULPS + 12) * U * sum(np.abs(t) for t in terms))
        worst = inflate(worst)
    return np.where(bad | ~np.isfinite(worst), math.inf, worst)


def slope_change_at_ends(name: str, c, w, floor: float | None):
    """sup |phi'(z) - phi'(c)| over [c - w, c + w] (clipped at `floor`) for the convex exp, 1/z and z^(-1/2) (at an end
    point: phi' increases), raised by its rounding; None for the other curves; +inf where lo <= 0."""
    if name not in CONVEX:
        return None
    c, lo, hi, bad = _end_points(name, c, w, floor)
    d1f = CURVES[name][1]
    with np.errstate(all="ignore"):
        d1c, d1lo, d1hi = d1f(c), d1f(lo), d1f(hi)
        out = inflate(np.maximum(d1c - d1lo, d1hi - d1c) + (FN_ULPS + 4) * U * (2 * np.abs(d1c) + np.abs(d1lo)
                                                                                 + np.abs(d1hi)))
    return np.where(bad | ~np.isfinite(out), math.inf, out)
