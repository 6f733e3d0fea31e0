"""IBP / CROWN / alpha-CROWN baselines on tiny heads: construction, relaxations, soundness, exact cases."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from bound_propagation import LpNormSet
from bound_propagation.bounds import IntervalBounds, LinearBounds

from attncert.baselines import linear_bound_baselines as lbb
from attncert.baselines.head_network import SOFTMAX_GRAPHS, head_network
from attncert.baselines.op_bilinear import BilinearProduct
from attncert.baselines.op_convex import PositiveReciprocal
from attncert.baselines.op_linear import InputLinear, interval_linear
from attncert.baselines.registry import head_factory
from attncert.baselines.relaxation_parameters import set_relaxation_rule
from attncert.head.problem import HeadProblem, random_head_problem
from attncert.baselines.l2_input_set import PerTokenL2Ball
from attncert.baselines.linear_bound_baselines import (
    EXTRA_METHODS,
    METHODS,
    baseline_upper_bound,
    baseline_upper_bounds,
    input_set,
)

ALL_METHODS = METHODS + EXTRA_METHODS

DT = torch.float64


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def g_batch(p: HeadProblem, Z: np.ndarray) -> np.ndarray:
    """g for a batch of token sets Z (B, n, d) (vectorized HeadProblem.value)."""
    q = (
        np.broadcast_to(p.nominal_query(), (len(Z), p.d_head))
        if p.mode == "fixed"
        else Z[:, p.query_index] @ p.W_Q + p.b_Q
    )
    s = np.einsum("bnh,bh->bn", Z @ p.W_K + p.b_K, q) / np.sqrt(p.d_head)
    a = np.exp(s - s.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    return np.einsum("bn,bn->b", a, (Z @ p.W_V + p.b_V) @ p.c)


def sampled_max(p: HeadProblem, rng: np.random.Generator, k: int = 20000) -> float:
    """Max of g over dense random feasible perturbations: vertices / sphere points, and interior points."""
    U = rng.uniform(-1.0, 1.0, (k, p.n, p.d))
    if p.norm == "linf":
        U[: k // 2] = np.sign(U[: k // 2])
    else:
        U = rng.standard_normal((k, p.n, p.d))
        U /= np.linalg.norm(U, axis=2, keepdims=True)
        U[k // 2:] *= rng.uniform(0, 1, (k - k // 2, p.n, 1)) ** (1.0 / p.d)
    Z = p.Z0 + p.radius * U
    vals = g_batch(p, Z)
    best = int(np.argmax(vals))
    assert p.in_ball(Z[best], tol=1e-12)
    assert abs(vals[best] - p.value(Z[best])) < 1e-12
    return float(vals[best])


def tiny_problems(mode: str, norm: str):
    rng = np.random.default_rng({"fixed": 1, "varying": 2}[mode] * 10 + {"linf": 0, "l2": 1}[norm])
    out = []
    for n, radius, q in ((3, 0.05, 2), (3, 0.3, 0), (2, 0.5, 1)):
        p = random_head_problem(rng, d=4, d_head=3, n=n, radius=radius, norm=norm, mode=mode)
        out.append(dataclasses.replace(p, query_index=q))
    return out


# ---------------------------------------------------------------------------------------------
# construction
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("softmax", SOFTMAX_GRAPHS)
@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_network_computes_the_head(mode, softmax):
    rng = np.random.default_rng(0)
    p = dataclasses.replace(random_head_problem(rng, d=4, d_head=3, n=3, mode=mode), query_index=1)
    C = rng.standard_normal((2, 3))
    net = head_network(p, C, softmax=softmax)
    D = rng.uniform(-0.4, 0.4, (6, p.n, p.d))
    y = net(torch.tensor(D.reshape(6, -1))).detach().numpy()
    for o in range(2):
        po = dataclasses.replace(p, c=C[o])
        assert np.allclose(y[:, o], [po.value(p.Z0 + Di) for Di in D], atol=1e-13)


@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_input_linear_back_substitution_equals_dense(mode):
    """The per-token (deduplicated) back-substitution equals A W exactly."""
    p = random_head_problem(np.random.default_rng(3), d=4, d_head=3, n=3, mode=mode)
    bnet = head_factory().build(head_network(p, np.eye(3)))
    layers = [m for m in bnet.modules() if isinstance(getattr(m, "module", None), InputLinear)]
    assert len(layers) == 2
    for layer in layers:
        W, b = layer.module.weight, layer.module.bias
        A = torch.randn(2, 5, W.size(0), dtype=DT)
        X, c = layer._backward((A, torch.zeros(2, 5, dtype=DT)))
        assert torch.allclose(X, A @ W, atol=1e-13)
        assert torch.allclose(c, A @ b, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# input sets and relaxations
# ---------------------------------------------------------------------------------------------
def test_per_token_l2_ball_concretize_is_exact():
    rng = np.random.default_rng(4)
    n, d, m = 3, 4, 5
    radii = torch.tensor([0.1, 0.7], dtype=DT)
    region = PerTokenL2Ball(torch.zeros(2, n * d, dtype=DT), radii, token_dim=d)
    A = torch.tensor(rng.standard_normal((m, n * d)))
    b = torch.tensor(rng.standard_normal(m))
    lo, up = region.concretize(LinearBounds(region, (A, b), (A, b)))
    for k, r in enumerate(radii.tolist()):
        blocks = A.reshape(m, n, d)
        maximizer = r * blocks / blocks.norm(dim=-1, keepdim=True)  # attains the maximum
        assert torch.allclose(up[k], (blocks * maximizer).sum((1, 2)) + b, atol=1e-13)
        assert torch.allclose(lo[k], -(blocks * maximizer).sum((1, 2)) + b, atol=1e-13)
        X = torch.tensor(rng.standard_normal((2000, n, d)))
        X = r * X / X.norm(dim=-1, keepdim=True)
        vals = X.reshape(2000, -1) @ A.T + b
        assert torch.all(vals <= up[k] + 1e-12) and torch.all(vals >= lo[k] - 1e-12)


def test_library_lpnormset_is_unsound_for_l2():
    """Why l2 uses our own set: the library's LpNormSet(p=2) bound lies below a feasible value."""
    a = torch.tensor([[1.0, 1.0, 1.0, 1.0]], dtype=DT)
    region = LpNormSet(torch.zeros(1, 4, dtype=DT), 1.0, 2.0)
    _, up = region.concretize(LinearBounds(region, None, (a.unsqueeze(0), torch.zeros(1, 1, dtype=DT))))
    feasible = float(a @ (a / a.norm()).T)  # a . x at x = a / ||a||, ||x||_2 = 1
    assert float(up) < feasible - 1e-6


def _bound_module(module_cls, lower, upper):
    factory = head_factory()
    return factory.build(module_cls()), IntervalBounds(None, lower, upper)


@pytest.mark.parametrize("which", ["exp", "reciprocal"])
def test_convex_relaxations_sound_for_every_parameter(which):
    rng = np.random.default_rng(5)
    lo = torch.tensor(rng.uniform(0.1 if which == "reciprocal" else -3.0, 3.0, 40), dtype=DT)
    width = torch.tensor(10.0 ** rng.uniform(-14, 0.5, 40), dtype=DT)  # includes point-like intervals
    up = lo + width
    from bound_propagation import Exp

    bm, iv = _bound_module(Exp if which == "exp" else PositiveReciprocal, lo[None], up[None])
    bm.alpha_beta(iv)
    f = torch.exp if which == "exp" else (lambda x: 1.0 / x)
    x = lo[None, None] + torch.tensor(rng.uniform(0, 1, (1, 50, 40)), dtype=DT) * width[None, None]
    x[0, 0], x[0, 1] = lo, up
    theta = torch.tensor(rng.uniform(0, 1, (1, 50, 40)), dtype=DT)
    theta[0, 0], theta[0, 1] = 0.0, 1.0
    ts, ti = bm.tangent(theta)
    ss, si = bm.secant()
    fx = f(x)
    tol = 1e-12 * (1 + fx.abs())
    assert torch.all(ts * x + ti <= fx + tol)
    assert torch.all(ss * x + si >= fx - tol)


def test_mccormick_planes_sound_for_every_kappa():
    rng = np.random.default_rng(6)
    h = 30
    lo = torch.tensor(rng.uniform(-2, 2, 2 * h), dtype=DT)
    up = lo + torch.tensor(rng.uniform(0, 2, 2 * h), dtype=DT)
    bm, iv = _bound_module(BilinearProduct, lo[None], up[None])
    bm.input_bounds = iv
    kl = torch.tensor(rng.uniform(0, 1, (1, 20, h)), dtype=DT)
    ku = torch.tensor(rng.uniform(0, 1, (1, 20, h)), dtype=DT)
    (lax, lay, lc), (uax, uay, uc) = bm.planes(kl, ku)
    t = torch.tensor(rng.uniform(0, 1, (2, 1, 20, 2 * h)), dtype=DT)
    t[0, 0, 0], t[1, 0, 0] = 0.0, 1.0
    pts = lo + t * (up - lo)
    x, y = pts[..., :h], pts[..., h:]
    xy = x * y
    assert torch.all(lax * x + lay * y + lc <= xy + 1e-12)
    assert torch.all(uax * x + uay * y + uc >= xy - 1e-12)


def test_positive_reciprocal_point_interval_is_ordered():
    """A point-like interval gets lower 1/u <= upper 1/l (the library's BoundReciprocal swaps them)."""
    lo = torch.tensor([[2.0]], dtype=DT)
    up = lo + 5e-13
    bm, iv = _bound_module(PositiveReciprocal, lo, up)
    bm.alpha_beta(iv)
    assert float(bm.alpha_lower) == 0.0 and float(bm.alpha_upper) == 0.0
    assert float(bm.beta_lower) == float(1.0 / up) < float(bm.beta_upper) == 0.5


# ---------------------------------------------------------------------------------------------
# soundness
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_bounds_are_sound_and_alpha_never_above_crown(mode, norm):
    rng = np.random.default_rng(7)
    for p in tiny_problems(mode, norm):
        best = sampled_max(p, rng)
        res = {m: baseline_upper_bound(p, m) for m in ALL_METHODS}
        for m, r in res.items():
            assert r.status == "ok", (m, r.status)
            assert r.upper >= best, (m, r.upper, best)
            assert r.seconds >= 0 and r.label
        # guaranteed by construction (both alpha variants start at CROWN's relaxation and keep the min)
        assert res["alpha_crown"].upper <= res["crown"].upper + 1e-12
        assert res["alpha_crown_last_layer"].upper <= res["crown"].upper + 1e-12
        assert res["alpha_crown_last_layer_lirpa_softmax"].upper <= res["crown_lirpa_softmax"].upper + 1e-12


@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_bounds_above_exact_or_ascent(mode, norm):
    if mode == "fixed":
        exact = pytest.importorskip("attncert.certify.exact_worst_case")
        reference = lambda p: exact.exact_worst_case(p).lo  # noqa: E731 - a feasible value
    else:
        ascent = pytest.importorskip("attncert.certify.best_feasible_ascent")
        reference = lambda p: ascent.best_feasible_ascent(p, restarts=8, steps=100).value  # noqa: E731
    p = tiny_problems(mode, norm)[1]
    for q in (p, p.negated()):
        ref = reference(q)
        for m in ALL_METHODS:
            assert baseline_upper_bound(q, m, alpha_iterations=5).upper >= ref, (m, mode, norm)


def test_alpha_crown_tightens_varying_query():
    p = random_head_problem(np.random.default_rng(0), d=4, d_head=3, n=3, radius=0.1, mode="varying")
    nominal = p.nominal_value()
    crown = baseline_upper_bound(p, "crown").upper
    last = baseline_upper_bound(p, "alpha_crown_last_layer").upper
    alpha = baseline_upper_bound(p, "alpha_crown").upper
    assert alpha - nominal <= 0.9 * (crown - nominal)
    assert last <= crown + 1e-12


@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_last_layer_alpha_is_sound(mode):
    rng = np.random.default_rng(13)
    for p in tiny_problems(mode, "linf")[:2]:
        r = baseline_upper_bound(p, "alpha_crown_last_layer", alpha_iterations=10)
        assert r.status == "ok" and r.upper >= sampled_max(p, rng)
        assert "last layer only" in r.label


# ---------------------------------------------------------------------------------------------
# hand-derivable exact cases
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_single_token_is_exact(mode, norm):
    """n = 1: a = 1 and g = c.v_1 is linear, so max g = nominal + r ||W_V c||_* for every method."""
    p = random_head_problem(np.random.default_rng(8), d=4, d_head=3, n=1, radius=0.2, norm=norm, mode=mode)
    exact = p.nominal_value() + p.radius * p.dual_norm(p.W_V @ p.c)
    for m in METHODS:
        assert baseline_upper_bound(p, m).upper == pytest.approx(exact, rel=0, abs=1e-8), m


@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_constant_keys_is_exact_for_crown(mode, norm):
    """W_K = 0: all scores equal, a_j = 1/n, g = mean_j c.v_j: CROWN = nominal + r ||W_V c||_* exactly."""
    p = random_head_problem(np.random.default_rng(9), d=4, d_head=3, n=3, radius=0.2, norm=norm, mode=mode)
    p = dataclasses.replace(p, W_K=np.zeros_like(p.W_K))
    exact = p.nominal_value() + p.radius * p.dual_norm(p.W_V @ p.c)
    for m in ("crown", "crown_mid", "crown_lirpa_softmax"):
        assert baseline_upper_bound(p, m).upper == pytest.approx(exact, rel=0, abs=1e-8), m
    assert baseline_upper_bound(p, "ibp").upper >= exact - 1e-12


# ---------------------------------------------------------------------------------------------
# batching, statuses, labels
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_batched_equals_single(method):
    p = random_head_problem(np.random.default_rng(10), d=4, d_head=3, n=3, radius=0.1, mode="varying")
    c2 = np.random.default_rng(11).standard_normal(3)
    problems = [p, p.negated(), p.with_radius(0.03), dataclasses.replace(p, c=c2 / np.linalg.norm(c2), radius=0.03)]
    batched = baseline_upper_bounds(problems, method, alpha_iterations=5)
    for q, r in zip(problems, batched):
        single = baseline_upper_bound(q, method, alpha_iterations=5)
        assert r.status == single.status == "ok"
        assert r.upper == pytest.approx(single.upper, rel=1e-9, abs=1e-12)


def test_failures_are_reported_as_statuses():
    """r = 1e4: exp overflows. IBP still gets a finite sound bound (the attention interval is [0, 1]:
    an infinite denominator bound gives 1/inf = 0, and 0 * inf is never formed); the linear relaxations
    of exp on [l, inf) are not finite, and the methods that use them report it."""
    p = random_head_problem(np.random.default_rng(1), d=4, d_head=3, n=3, radius=1e4, mode="varying", scale=3.0)
    ibp = baseline_upper_bound(p, "ibp")
    assert ibp.status == "ok" and ibp.upper >= sampled_max(p, np.random.default_rng(23), k=5000)
    for m in ALL_METHODS[1:]:
        r = baseline_upper_bound(p, m, alpha_iterations=2)
        assert r.status.startswith("nan: ") or r.status.startswith("error: ")
        assert np.isnan(r.upper)
    with pytest.raises(ValueError):
        baseline_upper_bound(p, "deepz")


def test_labels_name_method_and_input_set():
    p = random_head_problem(np.random.default_rng(12), d=4, d_head=3, n=2, radius=0.1, norm="l2")
    labels = {m: baseline_upper_bound(p, m, alpha_iterations=1).label for m in ALL_METHODS}
    assert labels["ibp"].startswith("IBP ") and labels["crown"].startswith("CROWN (auto_LiRPA relaxations")
    assert labels["crown_mid"].startswith("CROWN (mid plane")
    assert "alpha-CROWN (full" in labels["alpha_crown"]
    assert "alpha-CROWN (last layer only" in labels["alpha_crown_last_layer"]
    assert "auto_LiRPA softmax graph" in labels["crown_lirpa_softmax"]
    assert "last layer only" in labels["alpha_crown_last_layer_lirpa_softmax"]
    assert "auto_LiRPA softmax graph" in labels["alpha_crown_last_layer_lirpa_softmax"]
    assert len(set(labels.values())) == len(labels)
    assert all("per-token l2" in v for v in labels.values())


def test_input_set_box_and_ball_shapes():
    box = input_set("linf", np.array([0.1, 0.2]), 3, 4)
    ball = input_set("l2", np.array([0.1, 0.2]), 3, 4)
    assert box.size() == ball.size() == torch.Size([2, 12])
    assert torch.allclose(box.upper[1], torch.full((12,), 0.2, dtype=DT))
    assert torch.allclose(ball.bounding_hyperrect().upper[0], torch.full((12,), 0.1, dtype=DT))


# ---------------------------------------------------------------------------------------------
# relaxation rules: auto_LiRPA's planes and tangent points (hand cases)
# ---------------------------------------------------------------------------------------------
def _product_backward(rule, lx, ux, ly, uy, w):
    """CROWN back-substitution of w * (x * y) through one product on [lx, ux] x [ly, uy]."""
    bm = head_factory().build(BilinearProduct())
    set_relaxation_rule(bm, rule)
    bm.input_bounds = IntervalBounds(None, torch.tensor([[lx, ly]], dtype=DT), torch.tensor([[ux, uy]], dtype=DT))
    bm.bounded = True
    A = torch.tensor([[[w]]], dtype=DT)
    out = bm.crown_backward(
        LinearBounds(None, (A, torch.zeros(1, 1, dtype=DT)), (A, torch.zeros(1, 1, dtype=DT))), False
    )
    (Al, bl), (Au, bu) = out.lower, out.upper
    return Al[0, 0].tolist() + [float(bl[0, 0])], Au[0, 0].tolist() + [float(bu[0, 0])]


def test_auto_lirpa_rule_takes_one_mccormick_plane_per_side():
    """x in [1, 3], y in [-2, 5] (x the first operand, as auto_LiRPA's BoundMul / BoundMatMul):
    auto_LiRPA lower plane ly x + lx y - lx ly = -2x + y + 2, upper plane uy x + lx y - lx uy = 5x + y - 5;
    the mid rule averages them with the other two planes (uy x + ux y - ux uy = 5x + 3y - 15, and
    ly x + ux y - ux ly = -2x + 3y + 6)."""
    lower, upper = _product_backward("auto_lirpa", 1.0, 3.0, -2.0, 5.0, 1.0)
    assert lower == [-2.0, 1.0, 2.0] and upper == [5.0, 1.0, -5.0]
    lower, upper = _product_backward("mid", 1.0, 3.0, -2.0, 5.0, 1.0)
    assert lower == pytest.approx([1.5, 2.0, -6.5]) and upper == pytest.approx([1.5, 2.0, 0.5])
    # a negative coefficient swaps the planes: the upper bound of -xy is minus the lower plane
    lower, upper = _product_backward("auto_lirpa", 1.0, 3.0, -2.0, 5.0, -1.0)
    assert upper == [2.0, -1.0, -2.0] and lower == [-5.0, -1.0, 5.0]


def test_auto_lirpa_rule_exp_tangent_point():
    """auto_LiRPA's BoundExp: tangent at min((l + u)/2, l + 0.99); 1/x: tangent at the midpoint."""
    from bound_propagation import Exp

    lo = torch.tensor([[0.0, 0.0, -1.0]], dtype=DT)
    up = torch.tensor([[1.0, 4.0, 9.0]], dtype=DT)
    for rule, points in (("auto_lirpa", [0.5, 0.99, -0.01]), ("mid", [0.5, 2.0, 4.0])):
        bm = head_factory().build(Exp())
        set_relaxation_rule(bm, rule)
        bm.alpha_beta(IntervalBounds(None, lo, up))
        d = torch.tensor([points], dtype=DT)
        assert torch.allclose(bm.alpha_lower, torch.exp(d), rtol=1e-14)
        assert torch.allclose(bm.beta_lower, torch.exp(d) * (1 - d), rtol=1e-14, atol=1e-15)
        bm = head_factory().build(PositiveReciprocal())
        set_relaxation_rule(bm, rule)
        bm.alpha_beta(IntervalBounds(None, lo + 2.0, up + 2.0))
        mid = (lo + up) / 2 + 2.0
        assert torch.allclose(bm.alpha_lower, -1.0 / mid ** 2, rtol=1e-14)


def test_crown_rules_differ_and_both_are_sound():
    """On a head with real attention movement the two CROWN rules give different sound bounds."""
    rng = np.random.default_rng(21)
    p = random_head_problem(rng, d=4, d_head=3, n=4, radius=0.1, mode="fixed")
    best = sampled_max(p, rng)
    a, b = baseline_upper_bound(p, "crown").upper, baseline_upper_bound(p, "crown_mid").upper
    assert a >= best and b >= best and abs(a - b) > 1e-6


# ---------------------------------------------------------------------------------------------
# no lost units: exact linear intervals, the structural denominator bound, retry per radius
# ---------------------------------------------------------------------------------------------
def test_interval_linear_has_no_centre_radius_cancellation():
    """sum of [1, 1] and [1e-20, 1e20]: the centre-radius form loses the 1 (lower bound 0); W+ l + W- u keeps it."""
    W = torch.tensor([[1.0, 1.0], [1.0, -1.0]], dtype=DT)
    lo = torch.tensor([[1.0, 1e-20]], dtype=DT)
    up = torch.tensor([[1.0, 1e20]], dtype=DT)
    centre, radius = (lo + up) / 2, (up - lo) / 2
    assert float((centre @ W.T - radius @ W.abs().T)[0, 0]) <= 0.0  # what the library's form gives
    l, u = interval_linear(W, None, lo, up)
    assert l.tolist() == [[1.0, 1.0 - 1e20]] and u.tolist() == [[1e20, 1.0 - 1e-20]]
    # an overflowed input meets a zero weight: 0 * inf = 0, the other output stays finite
    W0 = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=DT)
    l, u = interval_linear(
        W0, None, torch.tensor([[1.0, 1.0]], dtype=DT), torch.tensor([[2.0, float("inf")]], dtype=DT)
    )
    assert l.tolist() == [[1.0, 1.0]] and u.tolist() == [[2.0, float("inf")]]


def test_reciprocal_floor_is_the_structural_lower_bound():
    bm = head_factory().build(PositiveReciprocal(floor=1.0))
    out = bm.ibp_forward(
        IntervalBounds(None, torch.tensor([[-5.0, 2.0]], dtype=DT), torch.tensor([[10.0, 4.0]], dtype=DT))
    )
    assert out.lower.tolist() == [[0.1, 0.25]] and out.upper.tolist() == [[1.0, 0.5]]
    with pytest.raises(ValueError):
        PositiveReciprocal(floor=0.0)


WIDE_RADII = [0.01, 0.1, 0.3, 0.6]


def _wide_score_head(seed: int = 0) -> HeadProblem:
    """scale 3: at r = 0.3-0.6 the exp outputs span ~1e+-20 and more; the old code's denominator
    interval reached 0 at the largest radius and the error erased all four radii of the head."""
    return random_head_problem(np.random.default_rng(seed), d=4, d_head=3, n=3, radius=0.1, mode="varying", scale=3.0)


@pytest.mark.parametrize("method", METHODS)
def test_head_with_huge_exp_range_gets_every_radius(method):
    p = _wide_score_head()
    problems = [p.with_radius(r) for r in WIDE_RADII]
    rng = np.random.default_rng(22)
    for q, r in zip(problems, baseline_upper_bounds(problems, method, alpha_iterations=5)):
        assert r.status == "ok", (method, q.radius, r.status)
        assert r.upper >= sampled_max(q, rng, k=5000), (method, q.radius)


def test_a_failing_batched_call_is_retried_per_radius(monkeypatch):
    """An exception in the all-radii call no longer erases the head: each radius is bounded alone."""
    p = random_head_problem(np.random.default_rng(10), d=4, d_head=3, n=3, radius=0.1, mode="varying")
    problems = [p.with_radius(r) for r in (0.01, 0.05, 0.1)]
    expected = [r.upper for r in baseline_upper_bounds(problems, "crown")]
    real = lbb._bound_group

    def flaky(first, spec_rows, radii, *args):
        if len(radii) > 1:
            raise ValueError("simulated failure of the batched call")
        if radii[0] == 0.05:
            raise ValueError("simulated failure at r = 0.05")
        return real(first, spec_rows, radii, *args)

    monkeypatch.setattr(lbb, "_bound_group", flaky)
    got = baseline_upper_bounds(problems, "crown")
    assert [r.status for r in got] == ["ok", "error: ValueError: simulated failure at r = 0.05", "ok"]
    assert got[0].upper == pytest.approx(expected[0], rel=1e-12) and got[2].upper == pytest.approx(
        expected[2], rel=1e-12
    )


def test_a_non_finite_radius_keeps_the_others_for_alpha_crown():
    """A radius whose bound overflows (r = 1e4) used to stall alpha-CROWN's shared loss for every radius
    of the call (the sum is NaN, the optimization stops at CROWN); after the per-radius retry the other
    radii are optimized as if alone."""
    p = random_head_problem(np.random.default_rng(0), d=4, d_head=3, n=3, radius=0.1, mode="varying")
    problems = [p.with_radius(r) for r in (0.03, 0.1, 1e4)]
    batched = baseline_upper_bounds(problems, "alpha_crown", alpha_iterations=5)
    assert [r.status[:3] for r in batched] == ["ok", "ok", "nan"]
    crown = baseline_upper_bounds(problems[:2], "crown")
    for q, r, c in zip(problems[:2], batched[:2], crown):
        single = baseline_upper_bound(q, "alpha_crown", alpha_iterations=5)
        assert r.upper == pytest.approx(single.upper, rel=1e-9)
        assert r.upper < c.upper - 1e-6  # optimized, not stuck at CROWN
