"""Min-IP targets, the error criterion, and the disjoint token pools."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attncert.minip.pools import sample_sequences, split_pool
from attncert.minip.task import all_tokens, error_rate, minip_targets, wrong


def test_targets_by_hand():
    X = np.array([[[1, 1, 0], [1, 0, 0], [0, 1, 1]]])
    assert minip_targets(X).tolist() == [[1, 0, 0]]
    assert minip_targets(np.array([[[1, 1, 0]]])).tolist() == [[2]]  # N = 1: the weight
    X = np.array([[[1, 1, 1], [1, 1, 0], [1, 1, 1]]])
    assert minip_targets(X).tolist() == [[2, 2, 2]]


@settings(max_examples=50)
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 6), m=st.integers(1, 12))
def test_targets_brute_force(seed, n, m):
    X = np.random.default_rng(seed).integers(0, 2, (5, n, m))
    want = [[min(int(X[b, i] @ X[b, j]) for j in range(n)) for i in range(n)] for b in range(5)]
    assert minip_targets(X).tolist() == want


def test_wrong_is_half_open():
    t = np.array([3, 3, 3, 3, 3])
    y = np.array([3.49, 2.51, 3.5, 2.5, np.nan])
    assert wrong(y, t).tolist() == [False, False, True, True, True]
    assert error_rate(y, t) == pytest.approx(0.6)


def test_all_tokens():
    T = all_tokens(4)
    assert T.shape == (16, 4) and len({t.tobytes() for t in T}) == 16


@pytest.mark.parametrize("bits,max_pool", [(6, 4096), (12, 4096), (20, 500)])
def test_split_pool_is_disjoint_and_seeded(bits, max_pool):
    p = split_pool(bits, 0.25, max_pool, seed=3)
    assert p.disjoint()
    assert len(p.train) + len(p.test) == min(2 ** bits, max_pool)
    q = split_pool(bits, 0.25, max_pool, seed=3)
    assert np.array_equal(p.train, q.train) and np.array_equal(p.test, q.test)
    assert not np.array_equal(split_pool(bits, 0.25, max_pool, seed=4).test, p.test)
    X = sample_sequences(p.test, 10, 3, np.random.default_rng(0))
    test_keys = {t.tobytes() for t in p.test}
    assert X.shape == (10, 3, bits) and all(t.tobytes() in test_keys for t in X.reshape(-1, bits))
