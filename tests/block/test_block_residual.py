"""Block residual analysis on tiny random blocks (GPT-2 and BERT families).

Checks: F equals the transformers modules; the torch.func Hessian equals finite differences and the
per-node chain-rule decomposition; the exact per-operation maxima; CROWN bounds every value of f found
by ascent or sampling; the per-operation sum is at least the joint second-order maximum.
"""
import itertools

import numpy as np
import pytest
import torch

from attncert.block.crown import crown_upper, residual_network
from attncert.block.crown_modules import BoundScalarCurve, ScalarCurveModule, block_factory
from attncert.block.build import reference_output, transition_from_model
from attncert.block.transitions import transition_points
from attncert.block.map import (GELU_ERF, GELU_TANH, RSQRT, SQUARE, forward, specification_values)
from attncert.block.residual import (QuadraticForms, analyze_transition, box_qp_max, box_qp_upper,
                                     effective_rank, max_bilinear_box, node_hessians, per_op_maxima,
                                     residual_values, softmax_forms)
from attncert.model.extraction import load_model
from bound_propagation.bounds import IntervalBounds

from tiny_blocks import tiny_block  # tests/tiny_blocks.py

torch.set_num_threads(1)
DT = torch.float64


@pytest.fixture(scope="module", params=["gpt2", "bert"])
def tiny(request, tiny_gpt2_dir, tiny_bert_dir):
    loaded, tr, C, cv = tiny_block(request.param, tiny_gpt2_dir, tiny_bert_dir)
    family = request.param
    return loaded.model, family, tr, C, cv


def test_forward_matches_transformers(tiny):
    model, family, tr, _, _ = tiny
    rng = np.random.default_rng(2)
    for scale in (0.0, 1e-3, 0.3):
        delta = rng.standard_normal(tr.d) * scale
        x = tr.x0.numpy().copy()
        x[tr.position] += delta
        ours = forward(tr, torch.as_tensor(delta, dtype=DT)).detach().numpy()
        ref = reference_output(model, family, tr.layer, x, tr.position)
        np.testing.assert_allclose(ours, ref, atol=1e-12, rtol=1e-10)


def test_hessian_matches_finite_differences(tiny):
    _, _, tr, C, cv = tiny
    eps = 1e-5
    grads = []
    for k in range(tr.d):
        e = torch.zeros(tr.d, dtype=DT)
        e[k] = eps
        pair = []
        for sgn in (1.0, -1.0):
            x = (sgn * e).requires_grad_(True)
            g = specification_values(tr, C, x)
            pair.append(torch.stack([torch.autograd.grad(g[h], x, retain_graph=True)[0] for h in range(C.shape[0])]))
        grads.append((pair[0] - pair[1]) / (2 * eps))
    fd = torch.stack(grads, dim=-1)                                    # (m, d, d)
    scale = cv.hessian.abs().max()
    assert float((fd - cv.hessian).abs().max() / scale) < 1e-6
    # the second-order term predicts f at a small radius
    delta = torch.as_tensor(np.random.default_rng(3).uniform(-1, 1, tr.d) * 1e-4, dtype=DT)
    f = residual_values(tr, C, cv.g0, cv.gradient, delta.expand(C.shape[0], tr.d))
    q = 0.5 * torch.einsum("d,mde,e->m", delta, cv.hessian, delta)
    assert float((f - q).abs().max() / q.abs().max()) < 1e-2


def test_node_decomposition_is_exact(tiny):
    _, _, tr, _, cv = tiny
    parts = node_hessians(tr, cv)
    total = sum(parts.values())
    assert float((total - cv.hessian).abs().max() / cv.hessian.abs().max()) < 1e-10
    # softmax as one operation = the exps and reciprocals of every head together
    forms = softmax_forms(tr, cv).dense.reshape(cv.hessian.shape[0], tr.n_heads, tr.d, tr.d).sum(1)
    pieces = parts["attn.exp"] + parts["attn.reciprocal"]
    assert float((forms - pieces).abs().max() / pieces.abs().max()) < 1e-10


def test_max_bilinear_box_exact():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 3))
    b = rng.standard_normal((6, 3))
    a[0, 1] = 0.0                                                      # a zero generator component
    ours = max_bilinear_box(torch.as_tensor(a), torch.as_tensor(b)).numpy()
    grid = np.linspace(-1, 1, 201)
    U = np.stack(np.meshgrid(grid, grid, grid, indexing="ij"), -1).reshape(-1, 3)
    brute = ((U @ a.T) * (U @ b.T)).max(0)
    assert np.all(ours >= brute - 1e-12)
    assert np.all(ours <= brute + 2e-3 * (np.abs(a).sum(1) * np.abs(b).sum(1)))


def test_box_qp_search_and_upper_bound():
    rng = np.random.default_rng(5)
    d = 10
    A = rng.standard_normal((3, d, d))
    Q = (A + A.transpose(0, 2, 1)) / 2
    # coordinatewise convex: vertex optimum
    Q[:, np.arange(d), np.arange(d)] = np.abs(Q[:, np.arange(d), np.arange(d)])
    V = np.array(list(itertools.product([-1.0, 1.0], repeat=d)))
    exact = 0.5 * np.einsum("vd,pde,ve->pv", V, Q, V).max(1)
    Qt = torch.as_tensor(Q)
    starts = torch.as_tensor(np.sign(rng.standard_normal((3, 16, d))))
    best, u, _, _ = box_qp_max(QuadraticForms(dense=Qt), starts)
    assert np.all(u.abs().numpy() <= 1 + 1e-12)
    np.testing.assert_allclose(best.numpy(), 0.5 * np.einsum("pd,pde,pe->p", u.numpy(), Q, u.numpy()))
    assert np.all(best.numpy() <= exact + 1e-12)
    assert np.all(best.numpy() >= exact - 1e-9)                         # 16 starts + vertex flips find it here
    assert np.all(box_qp_upper(Qt, 30).numpy() >= exact - 1e-12)


def test_top_eigenpairs_are_the_full_eigh_top_pairs():
    from attncert.block.box_qp import top_eigenpairs
    rng = np.random.default_rng(7)
    A = rng.standard_normal((4, 40, 40))
    M = torch.as_tensor((A + A.transpose(0, 2, 1)) / 2)
    M[3] = torch.diag(torch.arange(40, dtype=DT))                       # a known spectrum: top pair (39, e_39)
    mu, v = top_eigenpairs(M)
    w, V = torch.linalg.eigh(M)
    np.testing.assert_allclose(mu.numpy(), w[:, -1].numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(v.abs().numpy(), V[:, :, -1].abs().numpy(), atol=1e-10)   # up to sign
    assert float(mu[3]) == 39.0 and float(v[3, -1].abs()) == 1.0
    M[1, 0, 0] = float("inf")                                           # non-finite: torch's eigh decides
    try:
        w1, V1 = torch.linalg.eigh(M[1])
    except RuntimeError:
        with pytest.raises(RuntimeError):
            top_eigenpairs(M)
    else:
        mu, v = top_eigenpairs(M)
        assert torch.equal(mu[1].isnan(), w1[-1].isnan()) and (mu[1].isnan() or mu[1] == w1[-1])
        np.testing.assert_array_equal(v[1].numpy(), V1[:, -1].numpy())


def test_effective_rank():
    H = torch.diag(torch.tensor([1.0, -1.0, 1.0, 0.0], dtype=DT)).unsqueeze(0)
    assert float(effective_rank(H)) == pytest.approx(3.0)
    v = torch.randn(5, dtype=DT)
    assert float(effective_rank(torch.outer(v, v).unsqueeze(0))) == pytest.approx(1.0)


@pytest.mark.parametrize("curve", [GELU_ERF, GELU_TANH, SQUARE, RSQRT], ids=lambda c: c.name)
def test_scalar_curve_relaxation_is_sound(curve):
    rng = np.random.default_rng(6)
    if curve is RSQRT:
        lo = rng.uniform(0.05, 3.0, 200)
    else:
        lo = rng.uniform(-5, 4, 200)
    width = np.concatenate([rng.uniform(0, 0.01, 60), rng.uniform(0.01, 4, 140)])
    l, u = torch.as_tensor(lo, dtype=DT), torch.as_tensor(lo + width, dtype=DT)
    bm = BoundScalarCurve(ScalarCurveModule(curve), block_factory())
    bm.alpha_beta(IntervalBounds(None, l, u))
    ibp = bm.ibp_forward(IntervalBounds(None, l, u))
    t = torch.linspace(0, 1, 2001, dtype=DT).unsqueeze(1)
    z = l + t * (u - l)
    fz = curve.f(z)
    upper = bm.alpha_upper * z + bm.beta_upper
    lower = bm.alpha_lower * z + bm.beta_lower
    assert bool((fz <= upper + 1e-13).all()) and bool((fz >= lower - 1e-13).all())
    assert bool((fz <= ibp.upper + 1e-13).all()) and bool((fz >= ibp.lower - 1e-13).all())


def test_network_equals_f(tiny):
    _, _, tr, C, cv = tiny
    net = residual_network(tr, C.numpy(), cv.g0.numpy(), cv.gradient.numpy())
    delta = torch.as_tensor(np.random.default_rng(7).uniform(-0.1, 0.1, (4, tr.d)), dtype=DT)
    f = residual_values(tr, C, cv.g0, cv.gradient, delta.unsqueeze(0).expand(C.shape[0], 4, tr.d))
    torch.testing.assert_close(net(delta), f.T, atol=1e-13, rtol=1e-10)


def test_transition_crown_ascent_and_per_op(tiny):
    _, _, tr, C, cv = tiny
    radii = [1e-4, 1e-2, 0.1]
    rows, _ = analyze_transition(tr, C.numpy(), radii, qp_starts=8, ascent_restarts=4, ascent_steps=40, seed=0)
    assert all(r["status"] == "ok" for r in rows)
    for r in rows:
        assert r["crown_upper"] >= r["ascent_max"]
        assert r["per_op_sum"] >= r["second_order_max"] * (1 - 1e-12)
        assert r["crown_leading_order"] >= r["per_op_sum"] * (1 - 1e-12)
        assert r["second_order_upper"] >= r["second_order_max"] * (1 - 1e-12)
        assert r["hessian_decomposition_error"] < 1e-10
        if r["radius"] == 1e-4:
            assert abs(r["ascent_max"] / r["second_order_max"] - 1) < 0.02
            assert abs(r["crown_upper"] / r["crown_leading_order"] - 1) < 0.02    # CROWN's r^2 term
    # CROWN also bounds f at random points and vertices of the largest box
    crown = crown_upper(tr, C.numpy(), cv.g0.numpy(), cv.gradient.numpy(), [0.1])[0]
    rng = np.random.default_rng(8)
    pts = np.concatenate([rng.uniform(-1, 1, (64, tr.d)), np.sign(rng.standard_normal((64, tr.d)))]) * 0.1
    f = residual_values(
        tr, C, cv.g0, cv.gradient, torch.as_tensor(pts, dtype=DT).unsqueeze(0).expand(C.shape[0], -1, -1)
    )
    assert np.all(f.detach().numpy().max(1) <= crown)


def test_per_op_maxima_bound_each_node_term(tiny):
    _, _, tr, _, cv = tiny
    maxima = per_op_maxima(tr, cv)
    rng = np.random.default_rng(9)
    U = torch.as_tensor(np.sign(rng.standard_normal((256, tr.d))), dtype=DT)
    for name, H_n in node_hessians(tr, cv).items():
        vals = 0.5 * torch.einsum("vd,mde,ve->mv", U, H_n, U).max(1).values
        assert bool((maxima[name].sum(-1) >= vals - 1e-12).all()), name


def test_transition_points_and_errors(tiny):
    model, family, tr, _, _ = tiny
    assert transition_points(6, list(range(6))) == [0, 1, 2, 3, 4]
    assert transition_points(12, [0, 3, 4, 11]) == [3]
    with pytest.raises(ValueError, match="needs block 3"):
        transition_from_model(model, family, 2, tr.x0.numpy(), 3)           # the tiny models have 3 blocks
    with pytest.raises(ValueError, match="family"):
        transition_from_model(model, "t5", 0, tr.x0.numpy(), 3)


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_transition_from_extraction_equals_model(family, tiny_gpt2_dir, tiny_bert_dir):
    """The block stage reads only the extraction files: they carry every weight of the block map."""
    from dataclasses import fields

    from attncert.block.build import transition_from_arrays
    from attncert.model.extraction import extract_layers

    path = tiny_gpt2_dir if family == "gpt2" else tiny_bert_dir
    loaded = load_model({"name": f"tiny-{family}", "family": family, "source": str(path)})
    ids = np.random.default_rng(0).integers(100, 1000, size=(2, 6))
    arrays = extract_layers(loaded.model, family, ids, [1, 2])
    ours = transition_from_arrays(arrays[1], arrays[2], 1, prompt=1, position=3)
    ref = transition_from_model(loaded.model, family, 1, arrays[1]["residual"][1], position=3)
    for f in fields(ref):
        a, b = getattr(ours, f.name), getattr(ref, f.name)
        if isinstance(b, torch.Tensor):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        elif hasattr(b, "gain"):
            torch.testing.assert_close(a.gain, b.gain, rtol=0, atol=0)
            torch.testing.assert_close(a.bias, b.bias, rtol=0, atol=0)
            assert a.eps == b.eps
        else:
            assert a == b, f.name


def test_three_effective_rank_definitions():
    """Participation ratio, exp(spectral entropy) and stable rank: all k on k equal eigenvalues (of either
    sign); on an uneven spectrum stable rank <= participation ratio <= rank and entropy rank <= rank."""
    from attncert.block.box_qp import entropy_rank, stable_rank

    flat = torch.diag(torch.tensor([2.0, -2.0, 2.0, 0.0, 0.0], dtype=DT)).unsqueeze(0)
    for f in (effective_rank, entropy_rank, stable_rank):
        assert torch.allclose(f(flat), torch.tensor([3.0], dtype=DT))
    uneven = torch.diag(torch.tensor([4.0, 2.0, 1.0, 0.0], dtype=DT)).unsqueeze(0)
    pr, er, sr = effective_rank(uneven), entropy_rank(uneven), stable_rank(uneven)
    assert sr < pr < 3 and 1 < er < 3 and torch.isclose(sr, torch.tensor([21.0 / 16.0], dtype=DT))
