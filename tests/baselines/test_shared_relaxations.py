"""Shared work of the baselines gives the same numbers bit for bit: the methods of a head from one network and one
CROWN relaxation per rule (`shared_relaxations`), the box's concretization (`box_input_set`) and InputLinear's
back-substitution without a concatenation (`op_linear._TokenBlockProduct`), values and gradients."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from bound_propagation import HyperRectangle
from bound_propagation.bounds import LinearBounds

from attncert.baselines.box_input_set import CentredBox
from attncert.baselines.head_network import head_network
from attncert.baselines.linear_bound_baselines import METHODS, baseline_upper_bounds
from attncert.baselines.op_linear import InputLinear
from attncert.baselines.registry import head_factory
from attncert.baselines.shared_relaxations import head_upper_bounds
from attncert.head.problem import random_head_problem

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py

DT = torch.float64
ALPHA = {"alpha_iterations": 8, "alpha_lr": 0.1, "alpha_tolerance": 1e-3, "alpha_patience": 3,
         "alpha_betas": (0.5, 0.99)}


@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_shared_methods_equal_methods_one_at_a_time(mode):
    rng = np.random.default_rng(21)
    p = dataclasses.replace(random_head_problem(rng, d=4, d_head=3, n=4, radius=0.05, mode=mode), query_index=2)
    c2 = rng.standard_normal(3)
    problems = [p.with_radius(r) for r in (0.02, 0.05, 0.1)] + [dataclasses.replace(p, c=c2 / np.linalg.norm(c2))]
    shared = head_upper_bounds(problems, list(METHODS), **ALPHA)
    for method in METHODS:
        alone = baseline_upper_bounds(problems, method, **ALPHA)
        assert [r.status for r in shared[method]] == [r.status for r in alone] == ["ok"] * len(problems)
        assert [r.upper for r in shared[method]] == [r.upper for r in alone], method
        assert [r.label for r in shared[method]] == [r.label for r in alone]


def test_shared_methods_fall_back_when_the_shared_call_raises(monkeypatch):
    from attncert.baselines import shared_relaxations

    def fail(*args, **kwargs):
        raise RuntimeError("shared call failed")

    p = random_head_problem(np.random.default_rng(22), d=4, d_head=3, n=3, radius=0.05, mode="varying")
    problems = [p.with_radius(r) for r in (0.02, 0.05)]
    expected = {m: baseline_upper_bounds(problems, m, **ALPHA) for m in ("crown", "alpha_crown")}
    monkeypatch.setattr(shared_relaxations, "shared_upper_bounds", fail)
    got = head_upper_bounds(problems, ["crown", "alpha_crown"], **ALPHA)
    for m, results in expected.items():
        assert [r.upper for r in got[m]] == [r.upper for r in results]


def _bounds_and_grads(region, slope, intercept, weights):
    lower, upper = region.concretize(LinearBounds(region, (slope, intercept), (slope, intercept)))
    loss = (weights[0] * upper).sum() - (weights[1] * lower).sum()
    (grad,) = torch.autograd.grad(loss, slope)
    return lower.detach(), upper.detach(), grad


def test_centred_box_concretize_equals_the_library_with_gradient():
    gen = torch.Generator().manual_seed(3)
    r = torch.tensor([0.01, 0.2, 3.0], dtype=DT)
    half = r[:, None].expand(3, 40)
    slope = torch.randn(3, 5, 40, dtype=DT, generator=gen)
    slope[0, 1] = 0.0  # a zero row: the bound is the intercept
    slope = slope.requires_grad_(True)
    intercept = torch.randn(3, 5, dtype=DT, generator=gen)
    weights = torch.rand(2, 3, 5, dtype=DT, generator=gen)
    ours = _bounds_and_grads(CentredBox(-half, half), slope, intercept, weights)
    library = _bounds_and_grads(HyperRectangle(-half, half), slope, intercept, weights)
    for a, b in zip(ours, library):
        assert torch.equal(a, b)
    box = CentredBox(-half, half)
    W = torch.randn(7, 40, dtype=DT, generator=gen)  # an unbatched weight (InputLinear's exact IBP)
    for a, b in zip(box.concretize(LinearBounds(box, (W, W[:, 0]), (W, W[:, 0]))),
                    HyperRectangle(-half, half).concretize(LinearBounds(box, (W, W[:, 0]), (W, W[:, 0])))):
        assert torch.equal(a, b)


def test_centred_box_keeps_the_library_formula_for_infinite_coefficients():
    half = torch.full((2, 4), 0.5, dtype=DT)
    slope = torch.tensor([[[1.0, float("inf"), 0.0, 2.0]], [[1.0, 2.0, 3.0, 4.0]]], dtype=DT)
    intercept = torch.zeros(2, 1, dtype=DT)
    ours = CentredBox(-half, half).concretize(LinearBounds(None, (slope, intercept), (slope, intercept)))
    library = HyperRectangle(-half, half).concretize(LinearBounds(None, (slope, intercept), (slope, intercept)))
    for a, b in zip(ours, library):
        assert torch.equal(a.isnan(), b.isnan())
        assert torch.equal(a[~a.isnan()], b[~b.isnan()])


def _concatenated(mod: InputLinear, A: torch.Tensor) -> torch.Tensor:
    """InputLinear's per-token back-substitution as index_select / index_add / matmul and a concatenation."""
    parts = []
    for rows, inverse, block in zip(mod.token_rows, mod.token_inverse, mod.token_blocks):
        selected = A.index_select(-1, rows)
        if inverse is not None:
            merged = torch.zeros((*A.shape[:-1], block.size(0)), dtype=A.dtype)
            selected = merged.index_add(-1, inverse, selected)
        parts.append(selected.matmul(block))
    return torch.cat(parts, dim=-1)


@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_token_block_product_equals_the_concatenation_with_gradient(mode):
    p = random_head_problem(np.random.default_rng(5), d=4, d_head=3, n=4, mode=mode)
    bnet = head_factory().build(head_network(p, np.eye(3)))
    layers = [m for m in bnet.modules() if isinstance(getattr(m, "module", None), InputLinear)]
    gen = torch.Generator().manual_seed(6)
    for layer in layers:
        assert layer.module.at_most_two_tokens
        A = torch.randn(2, 5, layer.module.weight.size(0), dtype=DT, generator=gen).requires_grad_(True)
        R = torch.randn(2, 5, layer.module.weight.size(1), dtype=DT, generator=gen)
        X, _ = layer._backward((A, torch.zeros(2, 5, dtype=DT)))
        Y = _concatenated(layer.module, A)
        assert torch.equal(X, Y)
        (gx,) = torch.autograd.grad((X * R).sum(), A)
        (gy,) = torch.autograd.grad((Y * R).sum(), A)
        assert torch.equal(gx, gy)
