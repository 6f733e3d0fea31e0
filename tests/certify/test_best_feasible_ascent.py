"""Multi-start projected ascent: feasibility, seeding, and its place in the bound chain."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dataclasses

from attncert.certify.best_feasible_ascent import best_feasible_ascent, best_feasible_ascents
from attncert.certify.exact_worst_case import exact_worst_case
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.head.problem import random_head_problem

from attncert.head.ball_samples import feasible_perturbations

SETTINGS = dict(derandomize=True)


def _problem(seed, norm, mode):
    rng = np.random.default_rng(seed)
    return random_head_problem(rng, d=int(rng.integers(1, 7)), d_head=int(rng.integers(1, 4)),
                               n=int(rng.integers(1, 6)), radius=float(rng.uniform(0.01, 0.5)), norm=norm,
                               mode=mode, scale=float(rng.uniform(0.5, 2.0)))


def _sampled_values(P, rng, k=100):
    return np.array([P.value(P.Z0 + D) for D in feasible_perturbations(P, rng, k)])


@settings(max_examples=16, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]))
def test_varying_query_chain(seed, norm):
    """first order >= best ascent >= sampled values (varying query), and the same for the minimum."""
    P = _problem(seed, norm, "varying")
    asc = best_feasible_ascent(P, restarts=8, steps=120, seed=seed, num_threads=1)
    asc_min = best_feasible_ascent(P, restarts=8, steps=120, seed=seed, sense="min", num_threads=1)
    vals = _sampled_values(P, np.random.default_rng(seed + 1))
    assert P.in_ball(asc.Z) and P.in_ball(asc_min.Z)
    assert asc.value == P.value(asc.Z) and asc_min.value == P.value(asc_min.Z)
    assert first_order_certificate(P) >= asc.value >= vals.max()
    assert first_order_certificate(P, "min") <= asc_min.value <= vals.min()


@settings(max_examples=16, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]))
def test_fixed_query_ascent_below_exact(seed, norm):
    P = _problem(seed, norm, "fixed")
    asc = best_feasible_ascent(P, restarts=8, steps=120, seed=seed, num_threads=1)
    ex = exact_worst_case(P)
    assert P.in_ball(asc.Z)
    assert P.nominal_value() <= asc.value <= ex.hi


def test_seeded_and_extra_starts():
    P = random_head_problem(np.random.default_rng(4), d=5, d_head=3, n=4, radius=0.3, mode="varying")
    a = best_feasible_ascent(P, restarts=6, steps=60, seed=3, num_threads=1)
    b = best_feasible_ascent(P, restarts=6, steps=60, seed=3, num_threads=1)
    assert a.value == b.value and np.array_equal(a.Z, b.Z)
    assert a.start_values.shape == (6,)
    # a caller-supplied start is used: started at the exact maximizer, ascent cannot end below it
    Pf = random_head_problem(np.random.default_rng(4), d=5, d_head=3, n=4, radius=0.3)
    ex = exact_worst_case(Pf)
    c = best_feasible_ascent(Pf, restarts=2, steps=10, starts=(ex.witness - Pf.Z0)[None], num_threads=1)
    assert c.start_values.shape == (3,)
    assert c.value >= ex.lo - 1e-12 * ex.value_spread


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_ascent_finite_when_rounding_leaves_a_tiny_ball(norm):
    """r = 1e-4 around tokens of size ~100: Z0 + Delta rounds by ~1e-14, more than the old largest shrink
    (1e-12 r) could absorb, and the ascent returned -inf. It must return a feasible point, >= nominal."""
    rng = np.random.default_rng(0)
    base = random_head_problem(rng, d=4, d_head=3, n=5, radius=1e-4, norm=norm)
    from attncert.head.problem import HeadProblem

    P = HeadProblem(base.W_Q, base.W_K, base.W_V, base.b_Q, base.b_K, base.b_V, 100.0 * base.Z0,
                    base.query_index, base.c, 1e-4, norm)
    asc = best_feasible_ascent(P, restarts=4, steps=30, seed=0, num_threads=1)
    assert np.isfinite(asc.value) and P.in_ball(asc.Z) and asc.value == P.value(asc.Z)
    assert asc.value >= P.nominal_value()


@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_fused_head_equals_the_full_projections(mode):
    """g through the few directions it reads equals g through W_Q, W_K, W_V (the former code path)."""
    import torch

    from attncert.certify.best_feasible_ascent import _TorchHead

    P = random_head_problem(np.random.default_rng(9), d=7, d_head=3, n=5, radius=0.2, mode=mode, scale=2.0)
    D = torch.as_tensor(feasible_perturbations(P, np.random.default_rng(1), 20))
    cpu = torch.device("cpu")
    fused, full = _TorchHead(P, cpu, fused=True)(D), _TorchHead(P, cpu, fused=False)(D)
    direct = np.array([P.value(P.Z0 + d) for d in D.numpy()])
    assert np.allclose(fused.numpy(), direct, rtol=1e-12, atol=1e-12)
    assert np.allclose(full.numpy(), direct, rtol=1e-12, atol=1e-12)


def test_early_stop_keeps_the_warm_start():
    P = random_head_problem(np.random.default_rng(4), d=5, d_head=3, n=4, radius=0.3)
    ex = exact_worst_case(P)
    warm = (ex.witness - P.Z0)[None]
    res = best_feasible_ascent(P, restarts=2, steps=200, starts=warm, stop_tol=1e-9, num_threads=1)
    assert ex.lo - 1e-12 * ex.value_spread <= res.value <= ex.hi


@settings(max_examples=8, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]), mode=st.sampled_from(["fixed", "varying"]))
def test_batched_ascents_equal_the_ascent_of_each_radius_alone(seed, norm, mode):
    """One batch over several radii (extra starts, early stop on) gives every problem its own ascent's result,
    to the last bit: value, point and every start's best value."""
    P = _problem(seed, norm, mode)
    rng = np.random.default_rng(seed)
    problems = [dataclasses.replace(P, radius=r) for r in (0.3 * P.radius, P.radius, 2.5 * P.radius)]
    starts = [p.radius * rng.uniform(-1, 1, size=(2, p.n, p.d)) for p in problems]
    kw = dict(restarts=7, steps=40, seed=seed, stop_tol=1e-9, patience=5, num_threads=1)
    batched = best_feasible_ascents(problems, starts=starts, **kw)
    for p, s, b in zip(problems, starts, batched):
        alone = best_feasible_ascent(p, starts=s, **kw)
        assert b.value == alone.value and np.array_equal(b.Z, alone.Z)
        assert np.array_equal(b.start_values, alone.start_values)


def test_batched_ascents_need_problems_that_differ_only_in_the_radius():
    P = _problem(3, "linf", "varying")
    with pytest.raises(ValueError, match="only in the radius"):
        best_feasible_ascents([P, dataclasses.replace(P, c=-P.c)], restarts=2, steps=4)
    with pytest.raises(ValueError, match="same number of starts"):
        best_feasible_ascents([P, P], starts=[np.zeros((1, P.n, P.d)), np.zeros((2, P.n, P.d))], restarts=2, steps=4)
