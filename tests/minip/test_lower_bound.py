"""The witness family, its codes and the proven rank bound (each ingredient checked numerically)."""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attncert.minip.codes import constant_weight_code, hadamard
from attncert.minip.lower_bound import chain_ratios, rank_lower_bound, witness_bound
from attncert.minip.witness import witness_family


@pytest.mark.parametrize("n", [4, 8, 12, 16, 20, 24, 32, 44, 48])
def test_hadamard_and_code(n):
    H = hadamard(n)
    assert np.array_equal(H @ H.T, n * np.eye(n))
    assert (H[0] == 1).all() and (H[:, 0] == 1).all()
    C = constant_weight_code(n, n - 1).astype(int)
    G = C @ C.T
    assert (np.diag(G) == n // 2).all()
    assert (G[~np.eye(n - 1, dtype=bool)] == n // 4).all()


def test_hadamard_rejects_bad_orders():
    for n in (6, 10, 28):
        with pytest.raises(ValueError):
            hadamard(n)


def test_default_witness_family_and_bound():
    fam = witness_family(24, 10)
    assert fam.size == 10 * 19 == 190
    assert fam.gap == 6
    assert set(fam.targets[:, 0]) == {0, 6}
    b = witness_bound(fam)
    assert b.frobenius_value == Fraction(100, 10 + Fraction(90, 25))
    assert (b.min_ratio, b.frobenius, b.dominant, b.bound) == (5, 8, 6, 8)
    assert b.bound <= fam.n_queries + 1  # the rank-(S+1) construction solves the family


def test_bound_grows_with_queries_and_amplification_helps():
    bounds = [witness_bound(witness_family(24, s)).bound for s in (4, 8, 12, 16, 23)]
    assert bounds == sorted(bounds) and bounds[-1] == 13
    plain, ladder = witness_family(32, 10), witness_family(32, 10, ladder_step=4)
    assert witness_bound(plain).min_ratio == 7          # one step over gap 8: factor 7
    assert witness_bound(ladder).min_ratio == 9         # two steps of 4: factor 3 * 3
    assert witness_bound(ladder).bound > witness_bound(plain).bound


def test_chain_needs_all_three_sequences():
    x = np.array([1, 1, 1, 1, 1, 1, 0, 0])
    z = np.array([0, 0, 0, 0, 0, 0, 1, 1])     # <x,z> = 0
    z2 = np.array([1, 1, 1, 1, 0, 0, 0, 0])    # <x,z2> = 4
    full = [(z, z), (z2, z2), (z, z2)]
    assert chain_ratios(x, full, z)[z2.astype(np.int8).tobytes()] == 3
    assert z2.astype(np.int8).tobytes() not in chain_ratios(x, full[:2], z)


def test_rank_bound_formulas():
    R = np.full((10, 10), 5, dtype=object)
    np.fill_diagonal(R, 1)
    b = rank_lower_bound(R)
    assert (b.frobenius, b.dominant) == (8, 6)
    R[0, 1] = 0
    with pytest.raises(ValueError):
        rank_lower_bound(R)


def test_gap_domination_inequality_on_random_heads():
    """If a head is right on (x,z,z), (x,z',z'), (x,z,z') then W_z > (d - 1) W_z' (W = k_0 + 2 k)."""
    rng = np.random.default_rng(0)
    a, b = 0, 6
    n = 200_000
    k0, kz, kz2 = np.exp(rng.uniform(-8, 4, (3, n)))
    g0, gz, gz2 = rng.uniform(-3, 9, (3, n))
    y = lambda ks, gs: sum(k * g for k, g in zip(ks, gs)) / sum(ks)  # noqa: E731
    ok = ((np.abs(y((k0, kz, kz), (g0, gz, gz)) - a) < 0.5) & (np.abs(y((k0, kz2, kz2), (g0, gz2, gz2)) - b) < 0.5)
          & (np.abs(y((k0, kz, kz2), (g0, gz, gz2)) - a) < 0.5))
    assert ok.sum() > 100  # the sampler does produce correct heads
    assert ((k0 + 2 * kz)[ok] > (b - a - 1) * (k0 + 2 * kz2)[ok]).all()
    assert (kz2[ok] < kz[ok] / (b - a - 1)).all()


@settings(max_examples=40)
@given(S=st.integers(3, 12), r=st.integers(1, 8), seed=st.integers(0, 2 ** 31 - 1))
def test_rank_lemmas_on_random_nonnegative_factorizations(S, r, seed):
    rng = np.random.default_rng(seed)
    Phi, Psi = rng.exponential(size=(S, r)) ** 3, rng.exponential(size=(S, r)) ** 3
    M = Phi @ Psi.T
    B = M / np.diag(M)[:, None]
    # approximate identity: rank >= tr(B)^2 / ||B||_F^2
    assert min(r, S) >= S ** 2 / (B ** 2).sum() - 1e-9
    # dominant features: with S > r queries some pair shares a feature, M_st M_ts >= M_ss M_tt / r^2
    if S > r:
        prod = M * M.T / np.outer(np.diag(M), np.diag(M))
        np.fill_diagonal(prod, 0)
        assert prod.max() >= 1 / r ** 2 - 1e-12
