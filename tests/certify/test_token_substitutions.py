"""Enumerated token substitutions: separable root vs full enumeration of every choice pattern."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncert.head.problem import random_head_problem
from attncert.certify.token_substitutions import token_substitution_worst_case

def _instance(seed, mode):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5))
    P = random_head_problem(rng, d=int(rng.integers(1, 6)), d_head=int(rng.integers(1, 4)), n=n, mode=mode,
                            scale=float(rng.uniform(0.3, 2.5)))
    cands = [P.Z0[j] + rng.standard_normal((int(rng.integers(1, 5)), P.d)) * rng.uniform(0.1, 1.5)
             for j in range(n)]
    return P, cands


def _enumerate(P, cands):
    vals = {}
    for choice in itertools.product(*[range(len(c)) for c in cands]):
        vals[choice] = P.value(np.stack([cands[j][k] for j, k in enumerate(choice)]))
    return vals


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31), mode=st.sampled_from(["fixed", "varying"]))
def test_matches_full_enumeration(seed, mode):
    P, cands = _instance(seed, mode)
    vals = _enumerate(P, cands)
    spread = max(vals.values()) - min(vals.values()) + 1e-300
    for sense, pick in (("max", max), ("min", min)):
        res = token_substitution_worst_case(P, cands, sense)
        want = pick(vals.values())
        assert abs(res.value - want) <= 1e-12 * (spread + abs(want))
        # the reported choice is an actual pattern with the reported value
        assert res.value == vals[res.choice]
        assert np.array_equal(res.Z, np.stack([cands[j][k] for j, k in enumerate(res.choice)]))


def test_varying_query_choice_matters():
    """A case where the best pattern uses a non-nominal query token (exercised by the enumeration)."""
    hits = 0
    for seed in range(40):
        P, cands = _instance(seed, "varying")
        if len(cands[P.query_index]) < 2:
            continue
        res = token_substitution_worst_case(P, cands)
        vals = _enumerate(P, cands)
        assert abs(res.value - max(vals.values())) <= 1e-12 * (1 + abs(res.value))
        hits += res.choice[P.query_index] != 0
    assert hits > 0


def test_rejects_bad_candidates():
    P, cands = _instance(0, "fixed")
    for bad in (cands[:-1] if len(cands) > 1 else [], [np.zeros((0, P.d))] * P.n, [np.zeros((1, P.d + 1))] * P.n):
        try:
            token_substitution_worst_case(P, bad)
        except ValueError:
            continue
        raise AssertionError("bad candidate lists must be rejected")
