"""The diagonally scaled bilinear bound: sound against the exact box maximum (sign enumeration), never above the
unscaled bounds, any positive scalings valid in the audit's balls, and the first-order certificate it tightens."""
import itertools
import math

import numpy as np
from flint import ctx
from hypothesis import given, settings
from hypothesis import strategies as st

from attncert.audit.head_enclosure import PREC, diagonal_bound
from attncert.certify.diagonal_bilinear_bound import (diagonal_bilinear_bound, diagonal_scalings,
                                                      head_bilinear_bound, scaled_spectral_bound,
                                                      spectral_norm_bound)
from attncert.certify.first_order_certificate import bilinear_bound, first_order_certificate
from attncert.head.ball_samples import feasible_perturbations
from attncert.head.problem import random_head_problem
from attncert.head.rounding import gamma

SETTINGS = dict(derandomize=True)


def _weights(seed: int, d: int, dh: int, eq: int, ek: int) -> tuple[np.ndarray, np.ndarray]:
    """W_Q, W_K with entries of scale 10^eq, 10^ek, rows of varied size and, sometimes, a zero row or column."""
    rng = np.random.default_rng(seed)
    W_Q = rng.standard_normal((d, dh)) * 10.0 ** eq * np.exp(rng.uniform(-2, 2, (d, 1)))
    W_K = rng.standard_normal((d, dh)) * 10.0 ** ek * np.exp(rng.uniform(-2, 2, (d, 1)))
    if d > 1 and rng.uniform() < 0.3:
        W_Q[rng.integers(d)] = 0.0
    if dh > 1 and rng.uniform() < 0.3:
        W_K[:, rng.integers(dh)] = 0.0
    return W_Q, W_K


def box_maximum(W_Q: np.ndarray, W_K: np.ndarray) -> tuple[float, float]:
    """(max over x, y in {-1, 1}^d of x W_Q W_K^T y^T in floats, a bound on its rounding error): for fixed x the
    maximum over y is ||x M||_1, and the box maximum of a bilinear form is at a vertex."""
    M = W_Q @ W_K.T
    d, dh = W_Q.shape
    X = np.array(list(itertools.product([-1.0, 1.0], repeat=d)))
    best = float(np.abs(X @ M).sum(axis=1).max())
    err = 4.0 * gamma(d * d + dh + 10) * float((np.abs(W_Q) @ np.abs(W_K).T).sum())
    return best, err


def unscaled_bound(W_Q: np.ndarray, W_K: np.ndarray) -> float:
    """The linf bound before the diagonal scaling: min(sum_h ||W_Q[:, h]||_1 ||W_K[:, h]||_1, d ||M||_2)."""
    d, dh = W_Q.shape
    cols = float((np.abs(W_Q).sum(0) * np.abs(W_K).sum(0)).sum())
    return min(cols * (1.0 + gamma(2 * d + dh)), d * spectral_norm_bound(W_Q, W_K))


@settings(max_examples=60, **SETTINGS)
@given(seed=st.integers(0, 2**31), d=st.integers(1, 10), dh=st.integers(1, 4), eq=st.integers(-6, 6),
       ek=st.integers(-6, 6))
def test_certified_linf_beta_is_sound_and_no_looser(seed, d, dh, eq, ek):
    W_Q, W_K = _weights(seed, d, dh, eq, ek)
    true, err = box_maximum(W_Q, W_K)
    s, t = diagonal_scalings(W_Q, W_K)
    assert s.shape == t.shape == (d,) and np.all(np.isfinite(s)) and np.all(s > 0) and np.all(t > 0)
    diag = diagonal_bilinear_bound(W_Q, W_K)
    assert math.isfinite(diag) and diag >= true - err
    # the optimizer starts from s = t = 1 (d ||M||_2) and keeps the best point: never worse than that start
    assert diag <= d * spectral_norm_bound(W_Q, W_K) * (1 + 1e-9) + 1e-300
    beta = head_bilinear_bound(W_Q, W_K, "linf")
    assert true - err <= beta <= unscaled_bound(W_Q, W_K)
    assert beta == min(entry_bound(W_Q, W_K), unscaled_bound(W_Q, W_K), diag)


def entry_bound(W_Q: np.ndarray, W_K: np.ndarray) -> float:
    """sum_ab |M_ab| with the product's and the sum's rounding error (the fourth linf bound)."""
    d, dh = W_Q.shape
    cols = float((np.abs(W_Q).sum(0) * np.abs(W_K).sum(0)).sum())
    return (float(np.abs(W_Q @ W_K.T).sum()) + gamma(dh + 2) * cols) * (1.0 + 2.0 * gamma(d * d + dh + 4))


@settings(max_examples=40, **SETTINGS)
@given(seed=st.integers(0, 2**31), d=st.integers(1, 6), dh=st.integers(1, 4), eq=st.integers(-6, 6),
       ek=st.integers(-6, 6), cancel=st.booleans())
def test_certifier_and_audit_take_the_same_linf_beta(seed, d, dh, eq, ek, cancel):
    """The certifier's float beta (first order and the varying relaxation alike) is at least the smallest of the
    audit's four ball bounds, so an honest certificate is never refused for its beta; with W_K's columns
    cancelling W_Q's (M small against |W_Q| |W_K|^T) the entry sum is still a bound of the box maximum."""
    from attncert.audit.head_enclosure import HeadEnclosure

    W_Q, W_K = _weights(seed, d, dh, eq, ek)
    if cancel:
        W_K = W_Q[:, ::-1] * np.where(np.arange(dh) % 2, -1.0, 1.0) * (1.0 + 1e-9)
    true, err = box_maximum(W_Q, W_K)
    beta = head_bilinear_bound(W_Q, W_K, "linf")
    assert beta >= true - err
    zero = np.zeros(dh)
    head = HeadEnclosure(W_Q, W_K, W_Q, zero, zero, zero, np.zeros((1, d)), 0, zero)
    old = ctx.prec
    ctx.prec = PREC
    try:
        ball = head.bilinear_bound("linf", diagonal_scalings(W_Q, W_K))
        assert float(ball.upper()) >= true - err
        assert float(ball.lower()) <= beta
    finally:
        ctx.prec = old


@settings(max_examples=40, **SETTINGS)
@given(seed=st.integers(0, 2**31), d=st.integers(1, 8), dh=st.integers(1, 4), eq=st.integers(-6, 6),
       ek=st.integers(-6, 6))
def test_any_positive_scalings_give_a_valid_bound_in_the_audit(seed, d, dh, eq, ek):
    """A forged pair of scalings is still a bound (in balls, and in the certifier's floats); the honest pair's
    ball bound is at most the certifier's float value (so an honest certificate passes)."""
    W_Q, W_K = _weights(seed, d, dh, eq, ek)
    true, err = box_maximum(W_Q, W_K)
    rng = np.random.default_rng(seed + 1)
    old = ctx.prec
    ctx.prec = PREC
    try:
        for _ in range(3):
            s, t = np.exp(rng.uniform(-7, 7, d)), np.exp(rng.uniform(-7, 7, d))
            ball = diagonal_bound(W_Q, W_K, s, t)
            assert float(ball.upper()) >= true - err
            assert scaled_spectral_bound(W_Q, W_K, s, t) >= float(ball.lower())
        s, t = diagonal_scalings(W_Q, W_K)
        assert float(diagonal_bound(W_Q, W_K, s, t).upper()) <= scaled_spectral_bound(W_Q, W_K, s, t)
    finally:
        ctx.prec = old


def test_rank_one_head_is_bounded_exactly():
    """M = q k^T: max x M y^T = ||q||_1 ||k||_1, which the scalings s_i = |q_i|^-1/2, t_i = |k_i|^-1/2 attain."""
    q, k = np.array([[3.0], [-1.0], [0.5], [2.0]]), np.array([[1.0], [4.0], [-0.25], [0.5]])
    exact = float(np.abs(q).sum() * np.abs(k).sum())
    assert exact <= diagonal_bilinear_bound(q, k) <= exact * (1 + 1e-4)
    assert scaled_spectral_bound(q, k, np.abs(q[:, 0]) ** -0.5, np.abs(k[:, 0]) ** -0.5) <= exact * (1 + 1e-12)


def test_degenerate_weights_give_finite_scalings():
    """Zero matrices, zero rows and extreme scales: finite positive scalings, a finite bound, no NaN."""
    rng = np.random.default_rng(3)
    cases = [(np.zeros((5, 2)), rng.standard_normal((5, 2))), (np.zeros((4, 3)), np.zeros((4, 3))),
             (rng.standard_normal((6, 2)) * 1e8, rng.standard_normal((6, 2)) * 1e-8),
             (np.vstack([np.zeros((3, 2)), rng.standard_normal((3, 2))]), rng.standard_normal((6, 2)))]
    for W_Q, W_K in cases:
        s, t = diagonal_scalings(W_Q, W_K)
        assert np.all(np.isfinite(s)) and np.all(np.isfinite(t)) and np.all(s > 0) and np.all(t > 0)
        value = diagonal_bilinear_bound(W_Q, W_K)
        assert math.isfinite(value) and value >= box_maximum(W_Q, W_K)[0]


def test_invalid_scalings_give_no_bound():
    W_Q, W_K = _weights(0, 4, 2, 0, 0)
    good = np.ones(4)
    for bad in (np.zeros(4), -good, np.array([1.0, np.nan, 1.0, 1.0]), np.array([1.0, np.inf, 1.0, 1.0]), np.ones(3)):
        assert scaled_spectral_bound(W_Q, W_K, bad, good) == math.inf
        assert scaled_spectral_bound(W_Q, W_K, good, bad) == math.inf


@settings(max_examples=25, **SETTINGS)
@given(seed=st.integers(0, 2**31))
def test_linf_varying_first_order_certificate_tightens_soundly(seed):
    """The linf varying first-order certificate with the new beta is at most the one with the unscaled beta and
    at least every sampled value of the head."""
    rng = np.random.default_rng(seed)
    d, dh = int(rng.integers(2, 9)), int(rng.integers(1, 4))
    P = random_head_problem(rng, d=d, d_head=dh, n=int(rng.integers(1, 6)), radius=float(rng.uniform(0.05, 1.0)),
                            norm="linf", mode="varying", scale=float(rng.uniform(0.5, 2.0)))
    new, old = first_order_certificate(P), first_order_certificate(P, beta=unscaled_bound(P.W_Q, P.W_K))
    assert bilinear_bound(P) <= unscaled_bound(P.W_Q, P.W_K)
    assert new <= old + 1e-12 * (1 + abs(old))
    samples = feasible_perturbations(P, np.random.default_rng(seed + 5), 200)
    assert new >= max(P.value(P.Z0 + D) for D in samples)
