"""The rank-S witness construction (upper end of the bracket [bound, S]) and the constructions that
provably lie in the trained torch class (raw-bit maps, `realize`)."""
import numpy as np
import pytest
import torch

from attncert.minip.constructions import (all_sequences, construction_checks, dense_softmax_head,
                                          witness_rank_s_guarantee, witness_rank_s_head)
from attncert.minip.lower_bound import witness_bound
from attncert.minip.models import KernelAttention
from attncert.minip.realize import positive_feature_maps, set_raw_bit_maps, witness_rank_s_maps
from attncert.minip.witness import witness_family

FAMILIES = [(bits, s) for bits in (8, 12, 16, 20, 24) for s in range(2, bits)]


@pytest.mark.parametrize("both_orders", [False, True])
def test_rank_s_solves_every_family_exhaustively(both_orders):
    # every Hadamard family up to 24 bits, every number of queries, every input and every position
    for bits, S in FAMILIES:
        fam = witness_family(bits, S, both_orders=both_orders)
        head = witness_rank_s_head(fam)
        assert head.rank(bits) == S
        dev = np.abs(head(fam.sequences) - fam.targets)
        assert dev.max() <= witness_rank_s_guarantee(fam) < 0.5, (bits, S)


def test_rank_s_with_ladder_keys():
    fam = witness_family(24, 10, ladder_step=2)
    assert np.abs(witness_rank_s_head(fam)(fam.sequences) - fam.targets).max() <= witness_rank_s_guarantee(fam) < 0.5


def test_default_family_minimal_rank_is_bracketed_8_to_10():
    fam = witness_family(24, 10)
    checks = {r["construction"]: r for r in construction_checks(1, 2.0, fam)}
    assert witness_bound(fam).bound == 8
    assert checks["witness rank S"]["rank"] == 10 and checks["witness rank S"]["error"] == 0.0
    assert checks["witness rank S+1"]["rank"] == 11 and checks["witness rank S+1"]["error"] == 0.0


def test_rank_s_needs_its_large_constant_and_temperature():
    fam = witness_family(24, 10)
    # B too small: code-word positions read code words instead of the query token
    weak = witness_rank_s_head(fam, big=1e-3)
    assert (np.abs(weak(fam.sequences) - fam.targets)[:, 1:] >= 0.5).any()
    # beta too small: the query row no longer picks the minimum
    hot = witness_rank_s_head(fam, beta=0.05)
    assert (np.abs(hot(fam.sequences) - fam.targets)[:, 0] >= 0.5).any()


def _torch_predict(model, X):
    with torch.no_grad():
        return model(torch.as_tensor(X, dtype=torch.float64)).numpy()


@pytest.mark.parametrize("m", [2, 3, 4])
def test_positive_features_lie_in_the_trained_class(m):
    model = KernelAttention(m, rank=2 ** m, hidden=8, value_dim=3).double()
    set_raw_bit_maps(model, positive_feature_maps(m, beta=2.0, sharp=40.0))
    X = all_sequences(m, 3)
    np.testing.assert_allclose(_torch_predict(model, X), dense_softmax_head(2.0)(X), atol=1e-12, rtol=0)
    # with a blunt one-hot (L small) the realization is visibly off: the check can fail
    set_raw_bit_maps(model, positive_feature_maps(m, beta=2.0, sharp=1.0))
    assert np.abs(_torch_predict(model, X) - dense_softmax_head(2.0)(X)).max() > 1e-3


@pytest.mark.parametrize("bits,S", [(8, 3), (8, 7), (12, 5), (16, 15), (24, 3), (24, 10), (24, 23)])
def test_rank_s_variant_lies_in_the_trained_class(bits, S):
    fam = witness_family(bits, S)
    big = 1000.0
    beta = 4.0 + np.log(big) / fam.gap  # makes B e^{-beta D} = e^{-4 D} small for every gap D
    model = KernelAttention(bits, rank=S, hidden=16, value_dim=4).double()
    set_raw_bit_maps(model, witness_rank_s_maps(fam, beta=beta, big=big, sharp=10.0, value_dim=4))
    dev = np.abs(_torch_predict(model, fam.sequences) - fam.targets)
    assert dev.max() < 0.1, (bits, S, dev.max())
    # without the read-out term the query reads itself as <q_s, q_s> = 2D on (q_s, a_t, a_t)
    maps = witness_rank_s_maps(fam, beta=beta, big=big, sharp=10.0, value_dim=4)
    A, cA = maps["a"]
    maps["a"] = (A[:bits], cA[:bits])
    set_raw_bit_maps(model, maps)
    assert np.abs(_torch_predict(model, fam.sequences) - fam.targets).max() >= 0.5


def test_rank_s_variant_rejects_families_it_does_not_cover():
    with pytest.raises(ValueError):
        witness_rank_s_maps(witness_family(24, 2), 3.0, 1e3, 10.0, 4)
    with pytest.raises(ValueError):
        witness_rank_s_maps(witness_family(24, 10, ladder_step=2), 3.0, 1e3, 10.0, 4)
