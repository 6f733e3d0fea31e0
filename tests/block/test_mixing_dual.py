"""The SDP dual read off the mixing method's primal (block/mixing_dual.py): checked by the certificate's Cholesky,
it covers every vertex; it reaches the SDP value within 0.1 % (the primal value beneath it); it is well below the
subgradient dual on matrices like the centre Hessians; any matrix (indefinite, negative, zero, huge, non-finite)
gives a finite verified bound or +inf, never an exception."""
import itertools

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncert.block.certificate import rank_one_box_upper, verified_pd
from attncert.block.mixing_dual import mixing_dual, mixing_factors

DT = torch.float64


def _sym(P, n, seed, scale=1.0):
    A = torch.randn(P, n, n, dtype=DT, generator=torch.Generator().manual_seed(seed))
    return scale * 0.5 * (A + A.transpose(-1, -2))


def _verified(M, y):
    P, n, _ = M.shape
    return rank_one_box_upper(M, torch.zeros(P, n, dtype=DT), 0, candidate=(y, torch.zeros(P, dtype=DT)))


def test_the_mixing_dual_is_verified_covers_every_vertex_and_meets_its_primal():
    n = 10
    M = _sym(5, n, 0)
    M[0] = M[0] - 3.0 * torch.eye(n, dtype=DT)                       # a negative diagonal: interior rows
    V = mixing_factors(M, rank=6, sweeps=60)
    assert torch.all(V.norm(dim=-1) <= 1 + 1e-12)
    y = mixing_dual(M, V)
    bound, yv, t = _verified(M, y)
    assert torch.all(t == 0) and torch.all(verified_pd(torch.diag_embed(yv) - M))
    vertices = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=n)), dtype=DT)
    brute = 0.5 * torch.einsum("vd,pde,ve->pv", vertices, M, vertices).amax(-1)
    primal = 0.5 * ((M @ V) * V).sum((-1, -2))                        # a feasible X = V V^T: below the SDP
    assert torch.all(brute <= bound)
    assert torch.all(bound <= primal * (1 + 1e-3) + 1e-9)             # the dual meets the primal: the SDP value
    forged, _, _ = _verified(M, 0.5 * y)                               # a candidate below the SDP: the check raises it
    assert torch.all(brute <= forged)


def test_the_mixing_dual_beats_the_subgradient_dual_on_spiked_low_rank_forms():
    """Forms like the centre Hessians (a few strong directions over small noise), d = 60: the mixing dual lies below
    the subgradient dual (with its rank-one term) by a clear margin, with the same Cholesky check."""
    P, n = 4, 60
    gen = torch.Generator().manual_seed(3)
    W = torch.randn(P, n, 3, dtype=DT, generator=gen)
    M = torch.einsum("pik,k,pjk->pij", W, torch.tensor([4.0, -2.0, 1.0], dtype=DT), W) + _sym(P, n, 4, 0.2)
    top = torch.linalg.eigh(M)[1][..., -1]
    sub, _, _ = rank_one_box_upper(M, top, 10)
    mix, _, _ = _verified(M, mixing_dual(M, mixing_factors(M)))
    assert torch.all(mix < 0.95 * sub)


def test_warm_factors_of_a_nearby_matrix_reach_its_dual():
    M = _sym(3, 30, 5)
    V = mixing_factors(M, sweeps=30)
    M2 = M + 0.01 * _sym(3, 30, 6)
    warm, _, _ = _verified(M2, mixing_dual(M2, mixing_factors(M2, sweeps=3, V0=V)))
    cold, _, _ = _verified(M2, mixing_dual(M2, mixing_factors(M2, sweeps=30)))
    cold3, _, _ = _verified(M2, mixing_dual(M2, mixing_factors(M2, sweeps=3)))
    assert torch.all(warm <= cold * (1 + 5e-3)) and torch.all(warm < cold3)


def test_non_finite_rows_give_inf_and_the_others_stay_finite():
    M = _sym(3, 8, 7)
    M[1, 2, 3] = M[1, 3, 2] = float("nan")
    M[2, 0, 0] = float("inf")
    y = mixing_dual(M, mixing_factors(M, sweeps=5))
    assert torch.isfinite(y[0]).all() and torch.isinf(y[1]).all() and torch.isinf(y[2]).all()


@settings(max_examples=25)
@given(n=st.integers(1, 7), scale=st.sampled_from([1e-12, 1e-3, 1.0, 1e3, 1e12]), seed=st.integers(0, 10_000),
       shift=st.floats(-5.0, 5.0), sweeps=st.integers(0, 8))
def test_any_matrix_gives_a_finite_bound_above_every_vertex(n, scale, seed, shift, sweeps):
    M = _sym(2, n, seed, scale) + shift * scale * torch.eye(n, dtype=DT)
    M[1] = 0.0
    bound, _, _ = _verified(M, mixing_dual(M, mixing_factors(M, rank=3, sweeps=sweeps)))
    vertices = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=n)), dtype=DT)
    brute = 0.5 * torch.einsum("vd,pde,ve->pv", vertices, M, vertices).amax(-1)
    assert np.all(np.isfinite(bound.numpy()))
    assert torch.all(brute <= bound)
