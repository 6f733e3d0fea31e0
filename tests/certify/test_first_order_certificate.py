"""First-order certificate: greedy LP vs brute force, interval soundness, order in r."""
import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from attncert.certify.exact_worst_case import exact_worst_case
from attncert.certify.first_order_certificate import (attention_lp_max, bilinear_bound, first_order_certificate,
                                              first_order_certificate_min, score_value_intervals)
from attncert.head.problem import random_head_problem

from attncert.head.ball_samples import feasible_perturbations

SETTINGS = dict(derandomize=True)


def _problem(seed, norm, mode):
    rng = np.random.default_rng(seed)
    return random_head_problem(rng, d=int(rng.integers(1, 7)), d_head=int(rng.integers(1, 4)),
                               n=int(rng.integers(1, 6)), radius=float(rng.uniform(0.01, 0.8)), norm=norm,
                               mode=mode, scale=float(rng.uniform(0.5, 2.0)))


def _samples(P, rng, k=200):
    return feasible_perturbations(P, rng, k)


@settings(max_examples=60, **SETTINGS)
@given(seed=st.integers(0, 2**31))
def test_greedy_lp_matches_box_vertices(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    l = rng.normal(0, 3, n)
    u = l + rng.uniform(0, 4, n)
    W = rng.normal(0, 2, n)
    val, k, _ = attention_lp_max(l, u, W)
    # linear-fractional in s over a box: the maximum is at a vertex
    best = -np.inf
    for pick in itertools.product([0, 1], repeat=n):
        s = np.where(np.array(pick) == 1, u, l)
        a = np.exp(s - s.max())
        best = max(best, a @ W / a.sum())
    assert abs(val - best) <= 1e-12 * (1 + np.abs(W).max())
    for _ in range(50):
        s = rng.uniform(l, u)
        a = np.exp(s - s.max())
        assert a @ W / a.sum() <= val + 1e-12 * (1 + np.abs(W).max())


@settings(max_examples=40, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]), mode=st.sampled_from(["fixed", "varying"]))
def test_intervals_contain_sampled_scores_and_values(seed, norm, mode):
    P = _problem(seed, norm, mode)
    l, u, W_lo, W_hi = score_value_intervals(P)
    rng = np.random.default_rng(seed + 7)
    q0 = P.nominal_query()
    for D in _samples(P, rng, 100):
        Z = P.Z0 + D
        q = q0 if mode == "fixed" else Z[P.query_index] @ P.W_Q + P.b_Q
        s = (Z @ P.W_K + P.b_K) @ q / np.sqrt(P.d_head)
        w = (Z @ P.W_V + P.b_V) @ P.c
        assert np.all(l <= s) and np.all(s <= u)
        assert np.all(W_lo <= w) and np.all(w <= W_hi)


@settings(max_examples=40, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]), mode=st.sampled_from(["fixed", "varying"]))
def test_certificate_bounds_sampled_values(seed, norm, mode):
    P = _problem(seed, norm, mode)
    vals = np.array([P.value(P.Z0 + D) for D in _samples(P, np.random.default_rng(seed + 3))])
    assert first_order_certificate(P) >= vals.max()
    assert first_order_certificate_min(P) <= vals.min()
    assert first_order_certificate_min(P) <= P.nominal_value() <= first_order_certificate(P)


@settings(max_examples=30, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]))
def test_bilinear_bound(seed, norm):
    rng = np.random.default_rng(seed)
    d, dh = int(rng.integers(1, 7)), int(rng.integers(1, 4))
    P = random_head_problem(rng, d=d, d_head=dh, norm=norm, mode="varying")
    beta = bilinear_bound(P)
    M = P.W_Q @ P.W_K.T
    if norm == "l2":
        true = np.linalg.norm(M, 2)
        assert true <= beta <= true * (1 + 1e-9) + 1e-12
    else:  # max over the box = max over sign vectors x of ||M^T x||_1
        true = max(np.abs(np.array(x) @ M).sum() for x in itertools.product([-1.0, 1.0], repeat=d))
        assert true <= beta


def test_gap_is_first_order_in_radius():
    """(first order - exact) / r tends to a positive constant: the gap shrinks only linearly."""
    for norm in ("linf", "l2"):
        P = random_head_problem(np.random.default_rng(11), d=6, d_head=3, n=5, radius=1.0, norm=norm)
        gaps = []
        for r in (4e-3, 2e-3, 1e-3):
            Pr = P.with_radius(r)
            gaps.append(first_order_certificate(Pr) - exact_worst_case(Pr).hi)
        assert all(g > 0 for g in gaps)
        assert 1.6 < gaps[0] / gaps[1] < 2.4 and 1.6 < gaps[1] / gaps[2] < 2.4


# ------------------------------------------------------------------------------------------------
# extreme radii and score widths
def test_attention_lp_max_when_every_lower_exponential_underflows():
    """Score intervals ~1600 wide: every e^{l_j - max u} underflows. The old prefix sums gave 0/0 at the
    all-lower threshold and np.argmax picked that NaN; each threshold now has its own shift."""
    l = np.array([-800.0, -900.0, -760.0])
    u = np.array([800.0, 700.0, 790.0])
    W = np.array([1.0, 0.0, -2.0])
    val, k, X = attention_lp_max(l, u, W)
    assert np.isfinite(val) and np.isfinite(X)
    best = -np.inf  # vertex enumeration with a per-vertex log-sum-exp shift
    for pick in itertools.product([0, 1], repeat=3):
        s = np.where(np.array(pick) == 1, u, l)
        a = np.exp(s - s.max())
        best = max(best, a @ W / a.sum())
    assert abs(val - best) <= 1e-12 and k == 1


@settings(max_examples=40, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]),
       mode=st.sampled_from(["fixed", "varying"]), log_scale=st.floats(-1.0, 1.0),
       log_r=st.floats(-4.0, float(np.log10(3.0))))
def test_first_order_finite_and_sound_at_any_radius(seed, norm, mode, log_scale, log_r):
    """Weight scales 0.1-10, radii 1e-4..3, n up to 16, both modes: finite, >= every sampled value (min: <=),
    and never above the trivial bound max_j W_j (below min_j W_lo_j for the minimum)."""
    rng = np.random.default_rng(seed)
    P = random_head_problem(rng, d=int(rng.integers(1, 7)), d_head=int(rng.integers(1, 5)),
                            n=int(rng.integers(1, 17)), radius=10.0 ** log_r, norm=norm, mode=mode,
                            scale=10.0 ** log_scale)
    vals = np.array([P.value(P.Z0 + D) for D in _samples(P, np.random.default_rng(seed + 3), 40)])
    fo, fom = first_order_certificate(P), first_order_certificate_min(P)
    assert np.isfinite(fo) and np.isfinite(fom)
    assert fo >= vals.max() and fom <= vals.min()
    _, _, W_lo, W_hi = score_value_intervals(P)
    assert fo <= W_hi.max() and fom >= W_lo.min()
