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


@settings(max_examples=60, derandomize=True)
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


def _brute(S, W):
    best = -np.inf
    for ch in itertools.product(*[range(len(s)) for s in S]):
        s = np.array([S[j][k] for j, k in enumerate(ch)])
        w = np.array([W[j][k] for j, k in enumerate(ch)])
        e = np.exp(s - s.max())
        best = max(best, float(e @ w / e.sum()))
    return best


@pytest.mark.parametrize("S, W", [
    # a heavy token (score 25) whose value is within rounding of the incumbent: dropping it for an option
    # of weight e^-52 is better, but w - t cancels in plain form (the iteration stopped at 13.89, not 14.67)
    ([[-13.94], [25.10, -3.67, -26.79, 14.18]], [[14.67], [13.89, -7.28, 8.87, 8.44]]),
    # the optimum needs the score-92 option dropped; every Newton gain on the way is below one ulp
    # (the iteration stopped at 2.30, not 12.33)
    ([[28.47, -14.39], [7.11, 8.08, -3.43, 7.04], [23.07, 20.51, 21.17], [13.97, 25.82, 92.17, 5.59]],
     [[-9.08, -4.83], [6.13, 4.34, 4.40, 2.78], [4.74, 5.25, 5.30], [7.49, 12.37, 2.30, 7.23]]),
])
def test_separable_root_survives_scores_tens_apart(S, W):
    from attncert.certify.token_substitutions import _separable_root

    S, W = [np.array(s, float) for s in S], [np.array(w, float) for w in W]
    t, choice, _ = _separable_root(S, W)
    assert t == pytest.approx(_brute(S, W), rel=1e-12)
