"""The keys' support cut (`relaxation.key_support_cut`): its right side bounds the exact maximum over the key's set.

Reference: the expression e^x (alpha + gamma omegahat) evaluated densely on P's boundary (both chains, every edge
at 41 points), at P's interior points and at every x of the key factor's range; the bound must be >= all of them,
at any multiplier, any value scale, any exponent offset and any chain shape (a forger's alpha or gamma included).
"""
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attncert.certify.second_order.relaxation.key_support_cut import MARGIN, arc_corners, support_offsets
from attncert.head.projected_ball import Zonotope2D

SETTINGS = dict(suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _dense_max(sigma, omegahat, lo, hi, gamma, alpha, rng):
    """max e^x (alpha + gamma omegahat) over dense points of P's boundary, random interior points and x in
    [sigma + lo, sigma + hi]."""
    u = np.linspace(0.0, 1.0, 41)
    s_up = (sigma[:-1, None] + (sigma[1:] - sigma[:-1])[:, None] * u).ravel()
    w_up = (omegahat[:-1, None] + (omegahat[1:] - omegahat[:-1])[:, None] * u).ravel()
    s = np.concatenate([s_up, -s_up])
    w = np.concatenate([w_up, -w_up])
    mix = rng.uniform(size=(200, 2))  # points between the two chains at one sigma
    k = rng.integers(0, s_up.size, 200)
    s = np.concatenate([s, s_up[k]])
    w = np.concatenate([w, mix[:, 0] * w_up[k] - (1.0 - mix[:, 0]) * np.interp(-s_up[k], s_up, w_up)])
    xs = np.linspace(lo, hi, 7)
    vals = np.exp(s[:, None] + xs[None, :]) * (alpha[:, None, None] + gamma * w[None, :, None])
    return vals.reshape(alpha.size, -1).max(axis=1)


@st.composite
def chains(draw):
    seed = draw(st.integers(0, 10_000))
    d = draw(st.sampled_from([1, 2, 5, 40, 300]))
    rng = np.random.default_rng(seed)
    radius = 10 ** draw(st.floats(-6, 0.5))
    scale_w = 10 ** draw(st.floats(-4, 4))
    u_s, u_w = rng.standard_normal(d), rng.standard_normal(d) * scale_w
    u_s = u_s / np.abs(u_s).sum()  # R = radius
    if draw(st.booleans()):
        u_w[: d // 2] = 0.0  # edges with no value change, and parallel generators
        u_s[d // 2:] = u_s[0]
    return seed, Zonotope2D(u_s, u_w, radius), scale_w * radius * d


@settings(max_examples=60, **SETTINGS)
@given(chains(), st.floats(0.0, 18.0), st.floats(0.0, 4.0), st.floats(-6, 6), st.floats(-3, 3))
def test_support_bound_covers_every_point_of_the_key_set(chain, hk, b, log_gamma, log_alpha):
    seed, z, rho_w = chain
    rng = np.random.default_rng(seed)
    gamma = 10.0 ** log_gamma
    omegahat = z.omega / rho_w
    R = float(np.max(np.abs(z.sigma)))
    lo, hi = hk + R - b, hk + R + b + 1e-8  # the key factor's exponent offsets (x in [0, 2 hk + ...])
    alpha = np.concatenate([[0.0, 1.0, -1.0], rng.standard_normal(6) * 10.0 ** log_alpha])
    Ehat = np.full(alpha.size, math.exp(2.0 * (R + hk + b)))
    E, O = arc_corners(z.sigma, omegahat, lo, hi, gamma)
    delta = support_offsets(E, O, alpha, gamma, Ehat, float(np.max(np.abs(omegahat))))
    ref = _dense_max(z.sigma, omegahat, lo, hi, gamma, alpha, rng)
    assert np.all(np.isfinite(delta))
    assert np.all(delta >= ref)


def test_support_bound_is_tight_on_a_fine_chain():
    """The triangles of short edges lose O(edge length^2): on a 300-generator chain the bound is within 1e-6 of
    the dense maximum (relative to the row's magnitude) beyond its margin."""
    rng = np.random.default_rng(0)
    z = Zonotope2D(rng.standard_normal(300), rng.standard_normal(300), 0.003)
    omegahat = z.omega / np.max(np.abs(z.omega))
    alpha = rng.standard_normal(20)
    E, O = arc_corners(z.sigma, omegahat, 1.0, 1.5, 0.7)
    Ehat = np.full(alpha.size, math.e ** 4)
    delta = support_offsets(E, O, alpha, 0.7, Ehat, 1.0)
    ref = _dense_max(z.sigma, omegahat, 1.0, 1.5, 0.7, alpha, rng)
    scale = Ehat * (np.abs(alpha) + 0.7)
    assert np.all(delta - ref <= (MARGIN + 1e-6) * scale)
