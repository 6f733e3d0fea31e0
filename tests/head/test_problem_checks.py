"""`HeadProblem` rejects, with one line, every input that would give a meaningless bound: empty heads,
NaN or infinite entries, shapes that disagree. A valid problem still builds."""
import dataclasses

import numpy as np
import pytest

from attncert.head.problem import HeadProblem, random_head_problem


def _valid():
    return random_head_problem(np.random.default_rng(0), d=4, d_head=3, n=4)


def _fields(p: HeadProblem) -> dict:
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}


def test_a_valid_problem_builds():
    p = _valid()
    assert np.isfinite(p.nominal_value())


@pytest.mark.parametrize("change, message", [
    (dict(W_Q=np.zeros((4, 0)), W_K=np.zeros((4, 0)), W_V=np.zeros((4, 0)), b_Q=np.zeros(0), b_K=np.zeros(0),
          b_V=np.zeros(0), c=np.zeros(0)), "empty head"),
    (dict(Z0=np.zeros((0, 4)), query_index=0), "n >= 1"),
    (dict(W_Q=np.zeros((0, 3)), W_K=np.zeros((0, 3)), W_V=np.zeros((0, 3)), Z0=np.zeros((4, 0))), "empty head"),
    (dict(b_K=np.zeros(2)), "b_K must be"),
    (dict(query_index=4), "out of range"),
    (dict(query_index=1.0), "must be an integer"),
])
def test_empty_or_misshapen_heads_are_rejected(change, message):
    with pytest.raises(ValueError, match=message) as e:
        HeadProblem(**{**_fields(_valid()), **change})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "Z0", "c"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_infinite_inputs_are_rejected(name, bad):
    f = _fields(_valid())
    arr = np.array(f[name], dtype=float)
    arr.flat[-1] = bad
    with pytest.raises(ValueError, match=rf"{name} holds 1 NaN or infinite entry") as e:
        HeadProblem(**{**f, name: arr})
    assert "\n" not in str(e.value)
