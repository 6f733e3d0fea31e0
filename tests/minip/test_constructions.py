"""Exhaustive checks of the Min-IP constructions, and that the torch heads contain them."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from attncert.minip.constructions import (KernelHead, all_sequences, dense_error_bound, dense_softmax_head,
                                          exhaustive_check, positive_feature_head, rank1_head, witness_head)
from attncert.minip.models import DenseAttention, KernelAttention
from attncert.minip.task import minip_targets
from attncert.minip.witness import witness_family


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("n", [1, 2])
def test_rank1_solves_lengths_1_and_2_exactly(m, n):
    r = exhaustive_check(rank1_head(), m, n)
    assert r["max_abs_error"] == 0.0 and r["error"] == 0.0
    assert rank1_head().rank(m) == 1


@pytest.mark.parametrize("m", [2, 3, 4])
def test_rank1_fails_length_3(m):
    # the contrast: rank 1 is not enough at N = 3 (some sequence is wrong)
    assert exhaustive_check(rank1_head(), m, 3)["error"] > 0


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5])
def test_dense_softmax_solves_length_3(m):
    r = exhaustive_check(dense_softmax_head(2.0), m, 3)
    assert r["error"] == 0.0
    assert r["max_abs_error"] <= dense_error_bound(2.0, 3) < 0.5


def test_dense_softmax_bound_is_needed():
    # a too-high temperature breaks the construction, so the check can fail
    assert exhaustive_check(dense_softmax_head(0.3), 3, 3)["error"] > 0


@settings(max_examples=60)
@given(m=st.integers(6, 64), seed=st.integers(0, 2 ** 31 - 1), density=st.floats(0.05, 0.95))
def test_dense_softmax_constant_temperature_any_m(m, seed, density):
    X = (np.random.default_rng(seed).random((64, 3, m)) < density).astype(np.int8)
    dev = dense_softmax_head(2.0)(X) - minip_targets(X)
    assert dev.min() >= -1e-12 and dev.max() <= dense_error_bound(2.0, 3)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_positive_features_realize_the_softmax_kernel_exactly(m):
    pf = positive_feature_head(m, 2.0)
    assert pf.rank(m) == 2 ** m
    X = all_sequences(m, 3)
    assert (pf.phi_q(X.astype(float)) >= 0).all() and (pf.phi_k(X.astype(float)) >= 0).all()
    # one-hot query features (the tensor product of u_0 = 1 - x, u_1 = x)
    assert np.array_equal(pf.phi_q(X.astype(float)).sum(-1), np.ones(X.shape[:2]))
    np.testing.assert_allclose(pf(X), dense_softmax_head(2.0)(X), atol=1e-12, rtol=0)
    assert exhaustive_check(pf, m, 3)["error"] == 0.0


def test_witness_upper_bound_construction():
    fam = witness_family(24, 10)
    head = witness_head(fam)
    assert head.rank(24) == 11
    assert np.abs(head(fam.sequences) - fam.targets).max() < 0.5


def _realize(model, bits, q_x, k_x, a_x, b_x):
    """Set a torch head to maps that read only the raw bits: rows of the fused linear layer."""
    W = model.maps.weight
    with torch.no_grad():
        W.zero_()
        model.maps.bias.zero_()
        hid = W.shape[1] - bits
        off = np.cumsum([0] + model.sizes)
        for block, mat in zip(range(5), (q_x, k_x, None, a_x, b_x)):
            if mat is not None:
                W[off[block]:off[block] + mat.shape[0], hid:] = torch.as_tensor(mat, dtype=W.dtype)


def test_torch_kernel_head_contains_rank1_construction():
    m = 5
    model = KernelAttention(m, rank=1, hidden=8, value_dim=3).double()
    _realize(model, m, np.zeros((1, m)), np.zeros((1, m)), 2 * np.eye(m), -np.ones((1, m)))
    for n in (1, 2):
        X = all_sequences(m, n)
        with torch.no_grad():
            y = model(torch.as_tensor(X, dtype=torch.float64)).numpy()
        np.testing.assert_allclose(y, minip_targets(X), atol=1e-9)


def test_torch_dense_head_contains_softmax_construction():
    m = 4
    model = DenseAttention(m, hidden=8, value_dim=3).double()
    _realize(model, m, -2.0 * np.eye(m), np.eye(m), np.eye(m), None)
    X = all_sequences(m, 3)
    with torch.no_grad():
        y = model(torch.as_tensor(X, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(y, dense_softmax_head(2.0)(X), atol=1e-9)


def test_torch_kernel_head_is_normalized_kernel_attention():
    # the log-space weights softmax_j(logsumexp_k(lq + lk)) equal alpha_ij / sum_j alpha_ij
    torch.manual_seed(0)
    m, r = 6, 5
    model = KernelAttention(m, rank=r, hidden=8, value_dim=2).double()
    X = torch.as_tensor(np.random.default_rng(0).integers(0, 2, (7, 3, m)), dtype=torch.float64)

    def maps(x):
        x = torch.as_tensor(x, dtype=torch.float64)
        return model.maps(torch.cat([model.encoder(x), x], -1)).split(model.sizes, -1)

    with torch.no_grad():
        ref = KernelHead(phi_q=lambda x: maps(x)[0].exp().numpy(), phi_k=lambda x: maps(x)[1].exp().numpy(),
                         value=lambda x: torch.cat([torch.as_tensor(x), maps(x)[2]], -1).numpy(),
                         read_a=lambda x: maps(x)[3].numpy(), read_b=lambda x: maps(x)[4].numpy())
        np.testing.assert_allclose(model(X).numpy(), ref(X.numpy()), rtol=1e-10, atol=1e-10)
