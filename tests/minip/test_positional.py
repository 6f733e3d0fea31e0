"""Position-dependent feature maps: the witness bound covers them only with both key orders."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from attncert.minip.lower_bound import bound_record, chain_ratios, position_dependent_bound, witness_bound
from attncert.minip.positional import PositionalKernelHead, one_order_rank2_head
from attncert.minip.witness import witness_family


def test_both_orders_family():
    one, both = witness_family(24, 10), witness_family(24, 10, both_orders=True)
    assert one.size == 190 and both.size == 10 * (3 * 10 - 2) == 280
    pairs = {(s, a.tobytes(), b.tobytes()) for s, (_, a, b) in zip(both.query_of, both.sequences)}
    assert all((s, b, a) in pairs for s, a, b in pairs)


def test_position_dependent_bound_needs_both_orders():
    one, both = witness_family(24, 10), witness_family(24, 10, both_orders=True)
    assert witness_bound(one).bound == witness_bound(both).bound == 8
    assert position_dependent_bound(one) is None
    assert position_dependent_bound(both) == 8
    rec = bound_record(both)
    assert rec["bound_position_dependent"] == 8 and rec["family_size"] == 280


def test_chain_edges_in_one_or_both_orders():
    x = np.array([1, 1, 1, 1, 0, 0])
    z, z2 = np.array([0, 0, 0, 0, 1, 1]), np.array([1, 1, 1, 0, 0, 0])  # <x,z> = 0, <x,z2> = 3
    one = [(z, z), (z2, z2), (z, z2)]
    assert chain_ratios(x, one, z)[z2.astype(np.int8).tobytes()] == 2
    assert z2.astype(np.int8).tobytes() not in chain_ratios(x, one, z, position_dependent=True)
    both = one + [(z2, z)]
    assert chain_ratios(x, both, z, position_dependent=True)[z2.astype(np.int8).tobytes()] == 2


def test_rank2_position_dependent_head_solves_the_one_order_family():
    head = one_order_rank2_head()
    one = witness_family(24, 10)
    assert np.abs(head(one.sequences) - one.targets).max() == 0.0  # rank 2 < bound 8: not covered
    both = witness_family(24, 10, both_orders=True)
    assert (np.abs(head(both.sequences) - both.targets)[:, 0] >= 0.5).any()  # covered: it must fail


@settings(max_examples=40)
@given(seed=st.integers(0, 2 ** 31 - 1), r=st.integers(1, 5))
def test_position_dependent_predictions_are_separable(seed, r):
    # the identity behind Lemma 1': numerators and denominators of the query prediction add up
    # across the two key orders, N(z,z') + N(z',z) = N(z,z) + N(z',z') (same for D)
    rng = np.random.default_rng(seed)
    m = 6
    Pq, Pk = rng.random((3, m, r)), rng.random((3, m, r))
    Pv, Pa = rng.normal(size=(3, m, 2)), rng.normal(size=(3, m, 2))
    lin = lambda P: [lambda X, P=p: X @ P for p in P]  # noqa: E731
    head = PositionalKernelHead(phi_q=lin(Pq), phi_k=lin(Pk), value=lin(Pv), read_a=lin(Pa),
                                read_b=[lambda X: np.zeros(X.shape[:-1] + (1,))] * 3)
    x, z, z2 = (rng.integers(0, 2, m) | np.eye(m, dtype=int)[i] for i in range(3))
    seqs = np.stack([np.stack([x, u, v]) for u, v in ((z, z), (z2, z2), (z, z2), (z2, z))])
    y = head(seqs)[:, 0]
    k0 = x @ Pq[0] @ (x @ Pk[0])
    k = {(j, key): x @ Pq[0] @ (u @ Pk[j]) for j in (1, 2) for key, u in (("z", z), ("z2", z2))}
    D = np.array([k0 + k[1, "z"] + k[2, "z"], k0 + k[1, "z2"] + k[2, "z2"],
                  k0 + k[1, "z"] + k[2, "z2"], k0 + k[1, "z2"] + k[2, "z"]])
    N = y * D
    assert D[2] + D[3] == pytest.approx(D[0] + D[1], rel=1e-12)
    assert N[2] + N[3] == pytest.approx(N[0] + N[1], rel=1e-9, abs=1e-9)
