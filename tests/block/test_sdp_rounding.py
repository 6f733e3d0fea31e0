"""SDP hyperplane rounding of the centre quadratic (block/sdp_rounding.py) and its starts in the ascent on f.

Checks: the rounding returns sign vertices, distinct up to sign and from excluded ones, deterministically per seed;
on a planted rank-one quadratic its best vertex beats the best of as many random vertices; no vertex value and no
Burer-Monteiro value exceeds the SDP-dual upper bound `box_qp_upper` (nor, at d = 10, the exact vertex maximum);
the ascent maximum of f with the extra starts is at least the one without them (tiny transitions).
"""
import itertools

import numpy as np
import pytest
import torch

from attncert.block.box_qp import QuadraticForms, box_qp_upper
from attncert.block.residual import analyze_transition
from attncert.block.sdp_rounding import burer_monteiro, rounding_starts, sdp_rounding_vertices

from tiny_blocks import tiny_block  # tests/tiny_blocks.py

torch.set_num_threads(1)
DT = torch.float64


def _symmetric(P: int, d: int, seed: int) -> torch.Tensor:
    A = torch.randn(P, d, d, dtype=DT, generator=torch.Generator().manual_seed(seed))
    return (A + A.transpose(1, 2)) / 2


def _half_value(H: torch.Tensor, U: torch.Tensor) -> torch.Tensor:
    """1/2 u^T H u for U (P, S, d): (P, S)."""
    return 0.5 * torch.einsum("psd,pde,pse->ps", U, H, U)


def _sign_classes(U: torch.Tensor) -> set:
    return {tuple((u * u[0]).tolist()) for u in U}


def test_rounding_returns_distinct_sign_vertices():
    H = _symmetric(3, 12, 0)
    U = sdp_rounding_vertices(H, 4, seed=1)
    assert U.shape == (3, 4, 12) and U.dtype == DT
    assert bool((U.abs() == 1).all())
    for p in range(3):
        assert len(_sign_classes(U[p])) == 4
    vals = _half_value(H, U)
    assert bool((vals[:, :-1] >= vals[:, 1:]).all())                     # best first


def test_rounding_excludes_given_vertices():
    H = _symmetric(2, 12, 3)
    best = sdp_rounding_vertices(H, 1, seed=0)                            # (2, 1, d)
    # an excluded start is recognized up to sign and from a box point with an interior coordinate
    exclude = -best.clone()
    exclude[:, 0, 1] *= 0.5
    U = sdp_rounding_vertices(H, 3, seed=0, exclude=exclude)
    for p in range(2):
        assert tuple((best[p, 0] * best[p, 0, 0]).tolist()) not in _sign_classes(U[p])


def test_rounding_is_deterministic():
    H = _symmetric(2, 20, 4)
    torch.manual_seed(123)                                                # the global generator is not used
    a = sdp_rounding_vertices(H, 4, seed=7)
    torch.manual_seed(456)
    b = sdp_rounding_vertices(H, 4, seed=7)
    assert torch.equal(a, b)
    assert torch.equal(rounding_starts(H, 2, 7), rounding_starts(H, 2, 7))
    assert rounding_starts(H, 0, 7).shape == (2, 0, 20)


def test_rounding_beats_random_vertices_on_a_planted_quadratic():
    """H = v v^T + noise: the box maximum is near ||v||_1^2 / 2, a random vertex gives about ||v||^2 / 2."""
    P, d = 3, 30
    gen = torch.Generator().manual_seed(5)
    v = torch.randn(P, d, 1, dtype=DT, generator=gen)
    H = v @ v.transpose(1, 2) + 0.3 * _symmetric(P, d, 6)
    U = sdp_rounding_vertices(H, 4, seed=0)
    random = torch.sign(torch.randn(P, 32, d, dtype=DT, generator=gen))
    rounded_best = _half_value(H, U).amax(-1)
    random_best = _half_value(H, random).amax(-1)
    assert bool((rounded_best >= 1.5 * random_best).all())
    assert bool((rounded_best >= 0.9 * 0.5 * v.abs().sum((1, 2)) ** 2).all())
    assert bool((rounded_best <= box_qp_upper(H, 30)).all())


@pytest.mark.parametrize("seed", [0, 1])
def test_rounding_never_exceeds_the_upper_bounds(seed):
    """Every rounded vertex and the Burer-Monteiro SDP value are below the SDP-dual bound; at d = 10 every vertex
    is also below the exact vertex maximum (brute force), and the best one reaches it here."""
    P, d = 4, 10
    H = _symmetric(P, d, 10 + seed)
    U = sdp_rounding_vertices(H, 4, seed=seed)
    vals = _half_value(H, U)
    upper = box_qp_upper(H, 30)
    assert bool((vals <= upper.unsqueeze(-1)).all())
    V_all = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=d)), dtype=DT)
    exact = _half_value(H, V_all.expand(P, -1, -1)).amax(-1)
    assert bool((vals <= exact.unsqueeze(-1) + 1e-12).all())
    np.testing.assert_allclose(vals[:, 0].numpy(), exact.numpy(), rtol=1e-12)
    A = QuadraticForms(dense=H - torch.diag_embed(torch.diagonal(H, dim1=-2, dim2=-1)))
    V = burer_monteiro(A, 8, 40, torch.Generator().manual_seed(seed))
    torch.testing.assert_close(V.norm(dim=-1), torch.ones(P, d, dtype=DT))
    sdp_value = 0.5 * (torch.einsum("pdk,pde,pek->p", V, H, V))          # <H, V V^T> / 2, a feasible X
    assert bool((sdp_value <= upper).all())
    assert bool((sdp_value >= exact - 1e-9).all())                      # 40 steps reach the vertex optimum here


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_rounding_starts_never_lower_the_ascent(family, tiny_gpt2_dir, tiny_bert_dir):
    _, tr, C, _ = tiny_block(family, tiny_gpt2_dir, tiny_bert_dir)
    radii = [1e-3, 0.1, 0.3]
    kw = dict(qp_starts=8, ascent_restarts=4, ascent_steps=30, seed=0, alpha_crown=False)
    before, _ = analyze_transition(tr, C.numpy(), radii, sdp_rounding_starts=0, **kw)
    after, timings = analyze_transition(tr, C.numpy(), radii, sdp_rounding_starts=4, **kw)
    assert "sdp_rounding" in timings
    for b, a in zip(before, after):
        assert a["ascent_max"] >= b["ascent_max"] - 1e-12 * abs(b["ascent_max"])
        assert a["certificate_f"] == b["certificate_f"] and a["status"] == "ok"
