"""The long varying path's tight solve starts from where the same unit's paper-like solve ended (`long_start`), above
`long.RESUME_ABOVE` tokens: its cuts and memo, no new facets, at most `long.RESUMED_SOLVES` solves; a start taken
from another unit, or at fewer tokens, is ignored; the resumed bound is sound and the number the tight call returns
is proved by the dual it keeps. The tests lower RESUME_ABOVE to 0 so that small heads resume."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attncert.certify.second_order.varying_query.long as vl
import attncert.certify.second_order.varying_query.progress_stall as ps
from attncert.certify.best_feasible_ascent import best_feasible_ascent
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.second_order.certificate import paper_like_solve, second_order_certificate
from attncert.certify.second_order.dual_bound.dual_record import recording_duals
from attncert.head.problem import random_head_problem
from attncert.head.reduced_geometry import reduced_geometry

from head_strategies import sampled_max  # tests/head_strategies.py

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _unit(seed: int = 4, radius: float = 0.02, norm: str = "linf", n: int = 24):
    return random_head_problem(np.random.default_rng(seed), d=6, d_head=3, n=n, radius=radius, norm=norm,
                               mode="varying")


def _builds(monkeypatch) -> list:
    """`build_long_program` wrapped: per build (edges, support multipliers, shift cuts, memo)."""
    seen, build = [], vl.build_long_program

    def recorded(D, W_Q, upper_cone, mono, second, edges, tau_exp, shift_cuts, support_ts, memo):
        seen.append((edges, list(support_ts), list(shift_cuts), memo))
        return build(D, W_Q, upper_cone, mono, second, edges, tau_exp, shift_cuts, support_ts, memo)

    monkeypatch.setattr(vl, "build_long_program", recorded)
    return seen


def test_the_tight_solve_starts_from_the_paper_like_cuts_without_new_facets(monkeypatch):
    """linf, 24 tokens, the long program alone: the paper-like solve's end state (its last edges, support
    multipliers, shift cuts and memo) is the tight solve's first build; every later build has the same edges and
    support multipliers and one shift cut more than the one before; at most RESUMED_SOLVES rounds, no rough stop,
    and the bound lies between the best feasible value and the first-order bound."""
    monkeypatch.setattr(vl, "BESIDE_MAX", 0)
    monkeypatch.setattr(vl, "ROUGH_ABOVE", 0)
    monkeypatch.setattr(vl, "RESUME_ABOVE", 0)
    p = _unit()
    geo = reduced_geometry(p)
    paper = vl.second_order_varying_long(p, geo)
    start = paper.resume
    assert start is not None and paper.rounds >= 2 and start.support_ts and len(start.shift_cuts) >= 2
    builds = _builds(monkeypatch)
    stops = []
    solve = vl.solve_scaled
    monkeypatch.setattr(vl, "solve_scaled", lambda prog, opts, D, stop=None: (stops.append(stop.tol),
                                                                              solve(prog, opts, D, stop))[1])
    tight = vl.second_order_varying_long(p, geo, upper_cone=True, start=start)
    edges, support_ts, shift_cuts, memo = builds[0]
    assert all(np.array_equal(a, b) for a, b in zip(edges, start.edges)) and len(edges) == len(start.edges)
    assert support_ts == start.support_ts and len(shift_cuts) == len(start.shift_cuts) and memo is start.memo
    for before, after in zip(builds, builds[1:]):
        assert all(np.array_equal(a, b) for a, b in zip(before[0], after[0])) and before[1] == after[1]
        assert len(after[2]) - len(before[2]) in (0, 1)
    assert 1 <= tight.rounds <= vl.RESUMED_SOLVES and ps.ROUGH_STALL not in stops
    best = max(best_feasible_ascent(p, restarts=4, steps=60).value, sampled_max(p, k=16))
    assert best <= tight.value <= first_order_certificate(p) + 1e-12


@pytest.mark.parametrize("other", [dict(seed=5), dict(radius=0.03), dict(norm="l2")])
def test_a_start_from_another_unit_is_ignored(other, monkeypatch):
    """Another head, another radius or another norm: the start does not fit, and the tight solve is the cold one,
    bit for bit (its first build has the cold start's edges and a fresh memo)."""
    monkeypatch.setattr(vl, "BESIDE_MAX", 0)
    monkeypatch.setattr(vl, "RESUME_ABOVE", 0)
    p, q = _unit(), _unit(**other)
    start = vl.second_order_varying_long(q, reduced_geometry(q)).resume
    cold = vl.second_order_varying_long(p, reduced_geometry(p), upper_cone=True)
    builds = _builds(monkeypatch)
    given_start = vl.second_order_varying_long(p, reduced_geometry(p), upper_cone=True, start=start)
    assert given_start.value == cold.value and given_start.rounds == cold.rounds
    assert builds[0][3] is not start.memo


def test_no_start_is_taken_at_or_below_RESUME_ABOVE_tokens(monkeypatch):
    """The unit's own paper-like end state, 24 tokens with RESUME_ABOVE 24: the tight solve is the cold one."""
    monkeypatch.setattr(vl, "BESIDE_MAX", 0)
    monkeypatch.setattr(vl, "RESUME_ABOVE", 24)
    p = _unit()
    geo = reduced_geometry(p)
    start = vl.second_order_varying_long(p, geo).resume
    cold = vl.second_order_varying_long(p, geo, upper_cone=True)
    builds = _builds(monkeypatch)
    assert vl.second_order_varying_long(p, geo, upper_cone=True, start=start).value == cold.value
    assert builds[0][3] is not start.memo


def test_the_tight_call_keeps_the_dual_that_proves_its_resumed_number(monkeypatch):
    """Through `second_order_certificate` with the unit's paper-like solve passed in: the tight number is at most
    the paper-like one, the dual record holds a certificate of it (value <= the number), and the result returned
    does not carry the end state (only the paper-like solve passed in does)."""
    monkeypatch.setattr(vl, "RESUME_ABOVE", 0)
    p = _unit(n=80)
    paper = paper_like_solve(p)
    with recording_duals() as rec:
        tight = second_order_certificate(p, upper_cone=True, paper_like=paper)
    assert tight.value <= paper.result.value and tight.resume is None and paper.result.resume is not None
    assert rec.best is not None and rec.best.value <= tight.value


@settings(max_examples=8, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.integers(0, 10_000), st.sampled_from([17, 40, 96]), st.floats(math.log10(0.003), math.log10(0.3)),
       st.sampled_from(["linf", "l2"]), st.floats(0.3, 1.5))
def test_property_resumed_tight_sound_against_ascent(seed, n, log_r, norm, scale):
    """Random heads, both norms, radii over two decades, weight scales 0.3-1.5: the tight solve resumed from the
    paper-like one is finite and at least every feasible value found."""
    vl.RESUME_ABOVE, resume_above = 0, vl.RESUME_ABOVE  # hypothesis and function-scoped fixtures do not mix
    try:
        _resumed_tight_sound(seed, n, log_r, norm, scale)
    finally:
        vl.RESUME_ABOVE = resume_above


def _resumed_tight_sound(seed, n, log_r, norm, scale):
    p = random_head_problem(np.random.default_rng(seed), d=5, d_head=3, n=n, radius=10 ** log_r, norm=norm,
                            mode="varying", scale=scale)
    geo = reduced_geometry(p)
    paper = vl.second_order_varying_long(p, geo)
    tight = vl.second_order_varying_long(p, geo, upper_cone=True, start=paper.resume)
    assert math.isfinite(tight.value)
    assert tight.value >= max(best_feasible_ascent(p, restarts=4, steps=60).value, sampled_max(p, k=16))
