"""Moment cuts of the query's shift (`second_order.varying_query.shift_moment`): Lambda' bounds the form at every
point of the query set for any weights and any F, at every scale; the S-lemma factor keeps Lambda' at the plain
budget's value; on an l2 unit the cut lowers the certified bound (it can fail: without the cut it is higher)."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attncert.certify.second_order.varying_query.long as vl
from attncert.certify.second_order.varying_query.shift_cuts import all_keys_shift_cut
import attncert.certify.second_order.varying_query.long_program as vlp
from attncert.certify.best_feasible_ascent import best_feasible_ascent
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.second_order.dual_bound.weak_duality import weak_duality_bound
from attncert.certify.second_order.relaxation.rows import MONOTONE_POINTS
from attncert.certify.second_order.fixed_query.token_solve import solve_program
from attncert.certify.second_order.varying_query.data import VaryingData
from attncert.certify.second_order.varying_query.shift_moment import cut_bound, cut_rows, s_lemma_factor
from attncert.head.problem import random_head_problem
from attncert.head.reduced_geometry import reduced_geometry

SETTINGS = dict(suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _points(rng, d: int, norm: str, k: int = 64) -> np.ndarray:
    """Points of the unit box (vertices and inner points) or ball (sphere and inner points)."""
    x = rng.standard_normal((k, d))
    if norm == "linf":
        return np.where(rng.uniform(size=x.shape) < 0.7, np.sign(x), rng.uniform(-1, 1, x.shape))
    return x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.7, 1.0, (k, 1))


@settings(max_examples=40, **SETTINGS)
@given(st.integers(0, 10_000), st.sampled_from(["linf", "l2"]), st.floats(-6, 6), st.floats(-6, 6),
       st.integers(1, 40), st.integers(1, 12), st.integers(1, 6))
def test_lambda_bounds_the_form_at_every_point(seed, norm, log_v, log_f, m, d, dh):
    """sum_j w_j (v_j . x)^2 + ||F W_Q^T x||^2 <= Lambda' over the query set: weights, rows and F over twelve
    decades, the maximizing direction (top eigenvector, its sign vector for the box) included."""
    rng = np.random.default_rng(seed)
    Vt = rng.standard_normal((m, d)) * 10.0 ** log_v
    W_Q = rng.standard_normal((d, dh))
    w = rng.uniform(0, 2, m) * (rng.uniform(size=m) < 0.8)
    F = rng.standard_normal((dh, dh)) * 10.0 ** log_f
    lam = cut_rows(Vt, W_Q, w, F, norm, np.zeros(m))
    assert math.isfinite(lam) and lam > 0
    B = np.vstack([np.sqrt(w)[:, None] * Vt, F @ W_Q.T])
    top = np.linalg.eigh(B.T @ B)[1][:, -1]
    X = np.vstack([_points(rng, d, norm), top if norm == "l2" else np.sign(top) + (top == 0)])
    form = (w * (X @ Vt.T) ** 2).sum(axis=1) + (((X @ W_Q) @ F.T) ** 2).sum(axis=1)
    assert np.all(form <= lam * (1 + 1e-12))


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_row_errors_enter_the_bound(norm):
    """A functional off by e_j from its float row: the bound covers ||B x + e||^2, not only ||B x||^2."""
    rng = np.random.default_rng(4)
    B = rng.standard_normal((5, 7))
    err = np.full(5, 0.3)
    x = np.sign(B[0]) if norm == "linf" else B[0] / np.linalg.norm(B[0])
    assert np.sum((B @ x + err * np.sign(B @ x)) ** 2) <= cut_bound(B, norm, err)
    assert cut_bound(B, norm, err) > cut_bound(B, norm, np.zeros(5))


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_s_lemma_factor_keeps_the_budget(norm):
    """With F from `s_lemma_factor`, Lambda' is the plain weighted budget's (F = 0) up to rounding: the cut adds
    ||F Y||^2 for free, which is what charges the first moments in the cheap directions."""
    rng = np.random.default_rng(9)
    m, d, dh = 30, 16, 4
    W_Q = rng.standard_normal((d, dh))
    kq_lead = rng.standard_normal((m, dh))
    Vt = kq_lead @ W_Q.T
    w = rng.uniform(0.2, 1.0, m)
    F = s_lemma_factor(Vt, W_Q, w, kq_lead, norm)
    assert np.linalg.norm(F) > 0
    plain = cut_rows(Vt, W_Q, w, np.zeros((dh, dh)), norm, np.zeros(m))
    with_f = cut_rows(Vt, W_Q, w, F, norm, np.zeros(m))
    assert with_f <= plain * (1 + 1e-6) if norm == "l2" else with_f <= plain * 1.5


def test_the_cut_lowers_an_l2_bound():
    """An l2 unit on which the relaxation spreads the query's second moments over the keys: the certified bound
    with the cut is lower than without, and both lie above every feasible value found."""
    p = random_head_problem(np.random.default_rng(0), d=32, d_head=8, n=60, radius=0.02, norm="l2", mode="varying")
    D = VaryingData(p, reduced_geometry(p), first_order_certificate(p), center="key").drop_negligible()
    best = best_feasible_ascent(p, restarts=4, steps=60).value
    bounds = []
    for cuts in ([], all_keys_shift_cut(D, p.W_Q)):
        prog = vlp.build_long_program(D, p.W_Q, True, MONOTONE_POINTS, True, None, shift_cuts=cuts)
        _, _, _, z, _ = solve_program(prog, vl.LONG_LADDER)
        bound, _ = weak_duality_bound(prog.c, prog.A, prog.b, prog.dims, z, prog.lo, prog.hi)
        bounds.append(D.g0 + D.rho_o * bound + D.tail)
    nominal, fo = p.nominal_value(), first_order_certificate(p)
    assert best <= bounds[1] and (bounds[0] - bounds[1]) > 0.005 * (fo - nominal)  # measured: 0.0135


@pytest.mark.parametrize("bad", ["nan_w", "shape_w", "nan_F", "shape_F"])
def test_malformed_cuts_are_refused(bad):
    p = random_head_problem(np.random.default_rng(1), d=6, d_head=3, n=10, radius=0.05, norm="l2", mode="varying")
    D = VaryingData(p, reduced_geometry(p), first_order_certificate(p), center="key").drop_negligible()
    w, F = np.ones(D.n - 1), np.eye(3)
    if bad == "nan_w":
        w[0] = np.nan
    elif bad == "shape_w":
        w = np.ones(D.n)
    elif bad == "nan_F":
        F[1, 1] = np.nan
    else:
        F = np.eye(4)
    with pytest.raises(ValueError, match="shift cut"):
        vlp.build_long_program(D, p.W_Q, False, MONOTONE_POINTS, True, None, shift_cuts=[(w, F)])

