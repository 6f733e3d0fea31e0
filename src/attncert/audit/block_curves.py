"""The block map's scalar curves and sound bounds of their second and third derivatives over an interval, in numpy
(the audit's own implementation; the stage's is `block/map.py` and `block/enclosure.py`, in torch).

Curves: square z^2, rsqrt z^(-1/2), exp, reciprocal 1/z, GELU (erf) and its tanh approximation (GPT-2's gelu_new).
`interval_bounds(name, c, w)` gives (M2, M3) >= (sup |phi''|, sup |phi'''|) over [c - w, c + w]:

* square: (2, 0); exp: exp(c + w) for both; rsqrt, reciprocal: the derivatives at the interval's left end (they are
  decreasing in |.| on z > 0), +inf if the interval reaches 0;
* GELU: |phi''(c)| + K3 w and |phi'''(c)| + K4 w, with K3 >= sup |phi'''| and K4 >= sup |phi''''| over the line
  (the sup of the closed-form derivative on a grid of step 2e-4 over [-40, 40], times 1.2; the derivatives are
  smooth and decay in the tails, so the grid misses at most a relative O(1e-8) of the sup).

Rounding: numpy's exp, erf, tanh and power err by a few units of u = 2^-53; every value here is raised by
`FN_ULPS` units (8, half the stage's 16: both are generous). `inflate` raises a float sum of at most 10^6
nonnegative rounded terms to a bound of its exact value (gamma_{10^6} = 1.1e-10 < 2e-10).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

from attncert.head.rounding import UNIT_ROUNDOFF as U

FN_ULPS = 8.0
INFLATE = 2e-10
_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_K = math.sqrt(2.0 / math.pi)
_A = 0.044715


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
    """(M2, M3): bounds on sup |phi''| and sup |phi'''| over [c - w, c + w] (elementwise, w >= 0)."""
    lo, hi = c - w, c + w
    if name == "square":
        return np.full_like(w, 2.0), np.zeros_like(w)
    if name == "exp":
        top = inflate(np.exp(hi) * (1.0 + FN_ULPS * U))
        return top, top
    if name in ("rsqrt", "reciprocal"):
        low = lo * (1.0 - 4 * U)
        pos = low > 0
        safe = np.where(pos, low, 1.0)
        m2, m3 = (0.75 * safe ** -2.5, 1.875 * safe ** -3.5) if name == "rsqrt" else (2.0 / safe ** 3, 6.0 / safe ** 4)
        return (np.where(pos, inflate(m2 * (1 + FN_ULPS * U)), math.inf),
                np.where(pos, inflate(m3 * (1 + FN_ULPS * U)), math.inf))
    k3, k4 = global_sups(name)
    m2 = np.abs(CURVES[name][2](c)) * (1 + FN_ULPS * U) + k3 * w
    m3 = np.abs(CURVES[name][3](c)) * (1 + FN_ULPS * U) + k4 * w
    return inflate(m2) + 1e-300, inflate(m3) + 1e-300


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
