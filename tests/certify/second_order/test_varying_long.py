"""Varying query at long context (`second_order.varying_query.long`): soundness, the derivation, the free multipliers.

References: multi-start ascent and random box vertices / sphere points (feasible values: lower bounds of max g);
the lifted true points (every row of the assembled program must hold there, inside the box); any dual vector
(the bound is weak duality over the box, valid for every point of K^*, whatever the solver returns).
"""
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attncert.certify.second_order.varying_query.long as vl
from attncert.certify.second_order.varying_query.shift_cuts import all_keys_shift_cut
import attncert.certify.second_order.varying_query.long_program as vlp
import attncert.certify.second_order.varying_query.progress_stall as ps
import attncert.certify.second_order.varying_query.walk_share as ws
from attncert.certify.best_feasible_ascent import best_feasible_ascent
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.second_order.certificate import VARYING_LONG_ABOVE, second_order_certificate
from attncert.certify.second_order.dual_bound.weak_duality import _cone_slices, weak_duality_bound
from attncert.certify.second_order.relaxation.key_support_cut import start_support
from attncert.certify.second_order.relaxation.rows import MONOTONE_POINTS
from attncert.certify.second_order.fixed_query.token_solve import solve_program
from attncert.certify.second_order.varying_query.data import VaryingData
from attncert.head.problem import random_head_problem
from attncert.head.reduced_geometry import reduced_geometry

from head_strategies import sampled_max  # tests/head_strategies.py
from lifted_varying_point import lifted_factored_point  # tests/lifted_varying_point.py

SETTINGS = dict(suppress_health_check=[HealthCheck.too_slow], derandomize=True)
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@st.composite
def long_heads(draw, max_n=256):
    """Random heads with many tokens: n up to max_n, both norms, radii over two decades, weight scales 0.3-1.5."""
    seed = draw(st.integers(0, 10_000))
    n = draw(st.sampled_from([2, 5, 17, 40, 96, max_n]))
    d, dh = draw(st.integers(3, 8)), draw(st.integers(1, 4))
    radius = 10 ** draw(st.floats(math.log10(0.003), math.log10(0.3)))
    norm = draw(st.sampled_from(["linf", "l2"]))
    scale = draw(st.floats(0.3, 1.5))
    return random_head_problem(np.random.default_rng(seed), d=d, d_head=dh, n=n, radius=radius, norm=norm,
                               mode="varying", scale=scale)


@settings(max_examples=14, **SETTINGS)
@given(long_heads(), st.booleans(), st.booleans())
def test_long_path_sound_against_ascent(problem, upper_cone, negate):
    """Certificate >= every feasible value found (ascent, random vertices / sphere points), <= first order;
    both senses, both variants, both norms, n up to 256."""
    p = problem.negated() if negate else problem
    res = vl.second_order_varying_long(p, reduced_geometry(p), upper_cone=upper_cone)
    assert math.isfinite(res.value)
    best = max(best_feasible_ascent(p, restarts=4, steps=60).value, sampled_max(p, k=16))
    assert res.value >= best
    fo = first_order_certificate(p)
    assert res.value <= fo + 1e-12 * (1.0 + abs(fo))


def _lift(p, D, delta):
    """Every variable of the long program at the lifted true point of `delta` (D: key-centered data); the keys are
    read from the weights (the query inside the context included)."""
    def query_shift(j, di):
        k0 = p.Z0[D.order[j]] @ p.W_K + p.b_K  # the key of token order[j], from the weights
        return (di @ p.W_Q) @ (k0 - D.kbar) / np.sqrt(p.d_head)

    v = lifted_factored_point(p, D, delta, query_shift)
    U, V = v.pop("U"), v.pop("V")
    v["tau"] = np.array([v["tau"]])
    v["Y"] = p.W_Q.T @ v["W"]
    v.update(Us=U[:, 0], Uw=U[:, 1], Ub=U[:, 2], Vs=V[:, 0], Vw=V[:, 1], Vb=V[:, 2])
    return v


def _violation(prog, x) -> float:
    """Largest violation of b - A x in K (exponential cones by the exact formula), relative to the row scale."""
    s = prog.b - prog.A @ x
    scale = abs(prog.A) @ np.abs(x) + np.abs(prog.b) + 1e-300
    worst = 0.0
    for kind, a, b in _cone_slices(prog.dims)[0]:
        if kind == "zero":
            worst = max(worst, float(np.max(np.abs(s[a:b]) / scale[a:b])))
        elif kind == "nonneg":
            worst = max(worst, float(np.max(-s[a:b] / scale[a:b])))
        elif kind == "soc":
            worst = max(worst, (float(np.linalg.norm(s[a + 1:b])) - s[a]) / float(scale[a:b].max()))
        else:
            xx, yy, zz = s[a:b]
            worst = max(worst, (yy * math.exp(xx / yy) - zz) / float(scale[a:b].max()))
    return worst


@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("upper_cone", [False, True])
def test_lifted_true_points_are_feasible(norm, upper_cone):
    """Every row holds at the lifted point of 40 random perturbations (to 1e-12 of its scale), the point lies in
    the box, and the objective is >= g: the program is a relaxation of the head, row for row."""
    rng = np.random.default_rng(11)
    p = random_head_problem(rng, d=6, d_head=3, n=30, radius=0.05, norm=norm, mode="varying")
    p = replace(p, query_index=4)  # not the last token: every per-token field must follow the query-last order
    D = VaryingData(p, reduced_geometry(p), first_order_certificate(p), center="key").drop_negligible()
    assert D.n == p.n
    edges = [np.arange(p.d + 2)] * D.n if norm == "linf" else None  # every half-plane of each chain
    m = D.n - 1
    cuts = all_keys_shift_cut(D, p.W_Q) + [(rng.uniform(0, 2, m), rng.standard_normal((3, 3)))]  # any F is valid
    support = rng.uniform(-3.0, 3.0, 5)  # the keys' support cuts hold at any multiplier (linf)
    prog = vlp.build_long_program(D, p.W_Q, upper_cone, MONOTONE_POINTS, True, edges, shift_cuts=cuts,
                                  support_ts=support)
    assert norm != "linf" or prog.dims.nonneg >= 5 * (D.n - 1)
    for _ in range(40):
        delta = rng.standard_normal(p.Z0.shape)
        if norm == "linf":
            inner = rng.uniform(-1, 1, delta.shape)
            delta = p.radius * np.where(rng.uniform(size=delta.shape) < 0.6, np.sign(delta), inner)
        else:
            delta = p.radius * delta / np.linalg.norm(delta, axis=1, keepdims=True) * rng.uniform(0.5, 1.0, (p.n, 1))
        x = np.zeros(prog.c.size)
        for name, val in _lift(p, D, delta).items():
            x[prog.offsets[name]:prog.offsets[name] + np.size(val)] = val
        tau, Q = prog.block(x, "tau")[0], prog.block(x, "Q")
        x[prog.offsets["SC"]:] = [lam * tau - np.dot(w, Q) for lam, (w, _) in zip(prog.cut_lams, cuts)]
        assert np.all(prog.lo <= x) and np.all(x <= prog.hi)
        assert _violation(prog, x) <= 1e-12
        assert D.g0 + D.rho_o * float(-prog.c @ x) >= p.value(p.Z0 + delta) - 1e-12


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_bound_holds_for_every_multiplier(norm):
    """The free parameters of the certificate are the dual multipliers (the coupling rows' among them): the
    solver's, scaled, sign-flipped, noisy and random ones all give a bound >= the best feasible value."""
    rng = np.random.default_rng(2)
    p = random_head_problem(rng, d=6, d_head=3, n=40, radius=0.05, norm=norm, mode="varying")
    D = VaryingData(p, reduced_geometry(p), first_order_certificate(p), center="key").drop_negligible()
    edges = vl.start_edges(D) if norm == "linf" else None
    cuts = all_keys_shift_cut(D, p.W_Q)
    support = start_support((first_order_certificate(p) - D.g0 - D.tail) / D.rho_o) if norm == "linf" else []
    prog = vlp.build_long_program(D, p.W_Q, False, MONOTONE_POINTS, True, edges, shift_cuts=cuts, support_ts=support)
    _, _, _, z, _ = solve_program(prog, vl.LONG_LADDER)
    best = max(best_feasible_ascent(p, restarts=4, steps=60).value, sampled_max(p, k=16))
    to_g = lambda b: D.g0 + D.rho_o * b + D.tail  # noqa: E731
    tight, _ = weak_duality_bound(prog.c, prog.A, prog.b, prog.dims, z, prog.lo, prog.hi)
    assert to_g(tight) >= best
    for trial in range(60):
        kind = trial % 4
        if kind == 0:
            zt = z * rng.uniform(0.5, 2.0)
        elif kind == 1:
            zt = z * np.where(rng.uniform(size=z.size) < 0.1, -1.0, 1.0)
        elif kind == 2:
            zt = z + rng.standard_normal(z.size) * 10.0 ** rng.uniform(-8, 0) * (np.abs(z) + 1e-3)
        else:
            zt = rng.standard_normal(z.size) * 10.0 ** rng.uniform(-3, 3)
        bound, zr = weak_duality_bound(prog.c, prog.A, prog.b, prog.dims, zt, prog.lo, prog.hi)
        assert to_g(bound) >= best, trial
    assert to_g(tight) <= first_order_certificate(p)


@pytest.mark.parametrize("n", [2, 5, 16])
def test_short_varying_units_get_the_smaller_of_the_two_programs(n):
    """Above VARYING_LONG_ABOVE tokens the certificate takes the long path, which up to BESIDE_MAX tokens also
    solves the cvxpy program and keeps the smaller certified bound: never above either, and sound."""
    from attncert.certify.second_order.varying_query.factored import second_order_varying_factored

    assert VARYING_LONG_ABOVE < n <= vl.BESIDE_MAX
    p = random_head_problem(np.random.default_rng(4), d=8, d_head=4, n=n, radius=0.02, norm="linf", mode="varying")
    best = best_feasible_ascent(p, restarts=4, steps=60).value
    old = second_order_varying_factored(p, reduced_geometry(p)).value
    entry = second_order_certificate(p).value
    assert best <= entry <= old


@pytest.mark.parametrize("norm, scale", [("linf", 5.0), ("l2", 5.0), ("l2", 0.01)])
def test_wide_or_tiny_widths_are_rescued_by_the_cvxpy_programs(norm, scale):
    """Where this program's solve ends above the first-order bound (score half-widths of 4-7, or 1e-5), a unit of
    at most BESIDE_MAX tokens gets the cvxpy programs' bound (which try the unfactored program in turn): not a
    fallback, and sound."""
    p = random_head_problem(np.random.default_rng(1 if norm == "l2" else 0), d=6, d_head=3, n=40, radius=0.01,
                            norm=norm, mode="varying", scale=scale)
    res = vl.second_order_varying_long(p, reduced_geometry(p), upper_cone=scale < 1)
    assert not res.fallback, res.status
    assert res.value >= max(best_feasible_ascent(p, restarts=4, steps=60).value, sampled_max(p, k=16))


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_token_scaling_leaves_every_dual_bound_unchanged(norm):
    """The solver's change of variables (`token_scales`: each key's columns times a power of two) is exact: for
    any dual vector the scaled program's weak-duality bound over the scaled box is the unscaled one bit for bit,
    so the certified number and its audit do not depend on it. Keys get their weight's power of two, the query
    token and the shared columns 1."""
    rng = np.random.default_rng(5)
    p = random_head_problem(rng, d=6, d_head=3, n=40, radius=0.05, norm=norm, mode="varying", scale=2.0)
    D = VaryingData(p, reduced_geometry(p), first_order_certificate(p), center="key").drop_negligible()
    edges = vl.start_edges(D) if norm == "linf" else None
    prog = vlp.build_long_program(D, p.W_Q, False, MONOTONE_POINTS, True, edges)
    f = vl.token_scales(prog, D)
    m = D.n - 1
    assert np.all(np.log2(f) == np.round(np.log2(f))) and f.max() > 1.0
    lam = prog.offsets["lam"]
    assert f[lam + m] == 1.0 and f[0] == 1.0 and np.all(f[prog.offsets["W"]:prog.offsets["W"] + D.d] == 1.0)
    heavy = int(np.argmax(D.A[:m]))
    assert f[lam + heavy] == 1.0
    _, _, _, z, _ = vl.solve_scaled(prog, vl.LONG_LADDER[0], D)
    A_s = (prog.A @ sp.diags(f)).tocsc()
    for trial in range(8):
        zt = z if trial == 0 else z * rng.uniform(0.5, 2.0, z.size) + rng.standard_normal(z.size) * 1e-3
        plain, _ = weak_duality_bound(prog.c, prog.A, prog.b, prog.dims, zt, prog.lo, prog.hi)
        scaled, _ = weak_duality_bound(prog.c * f, A_s, prog.b, prog.dims, zt, prog.lo / f, prog.hi / f)
        assert scaled == plain, trial


def test_constant_query_factor_gives_finite_rows():
    """A key whose query factor is constant (H = 0) gets finite quadratic rows (mu <= tau), not 0 / 0."""
    from attncert.certify.second_order.varying_query.program import quadratic_rows

    qa, qb, qc = quadratic_rows(np.array([0.0, 0.3]))
    assert np.all(np.isfinite(qa)) and np.all(np.isfinite(qb)) and np.all(np.isfinite(qc))
    assert np.all(qa[0] == 1.0) and np.all(qb[0] == 0.0) and np.all(qc[0] == 0.0)
    assert np.all(qc[1] > 0)


@pytest.mark.parametrize("norm, seed, radius, tight", [("linf", 1, 0.02, False), ("linf", 1, 0.02, True),
                                                       ("l2", 0, 1e-4, False)])
def test_up_to_beside_max_tokens_never_looser_than_the_cvxpy_program(norm, seed, radius, tight, monkeypatch):
    """On at most BESIDE_MAX tokens the long path returns the smaller of its bound and the cvxpy program's, so the
    path choice by n costs no tightness (units where the long program alone is the looser one); above BESIDE_MAX
    the cvxpy program is not solved."""
    from attncert.certify.second_order.varying_query import factored

    p = random_head_problem(np.random.default_rng(seed), d=6, d_head=3, n=24, radius=radius, norm=norm,
                            mode="varying")
    geo = reduced_geometry(p)
    other = factored.second_order_varying_factored(p, geo, upper_cone=tight)
    res = vl.second_order_varying_long(p, geo, upper_cone=tight)
    assert res.value <= other.value and not res.fallback
    with monkeypatch.context() as mp:
        mp.setattr(vl, "_beside_factored", lambda problem, geo, res, *a: res)
        assert vl.second_order_varying_long(p, geo, upper_cone=tight).value > other.value
    calls = []
    monkeypatch.setattr(factored, "second_order_varying_factored", lambda *a, **k: calls.append(1))
    monkeypatch.setattr(vl, "BESIDE_MAX", p.n - 1)
    alone = vl.second_order_varying_long(p, geo, upper_cone=tight)
    assert calls == [] and math.isfinite(alone.value)  # (above BESIDE_MAX the attempts run in another order)


def test_progress_stall_ends_a_solve_only_where_objective_and_residuals_stall():
    """`ProgressStall`: True once the primal objective and the duality gap moved <= tol x the first-order gap over
    the window and neither residual halved; False while the objective moves or a residual still falls."""
    info = lambda p, gap, rp, rd: SimpleNamespace(cost_primal=-p, gap_abs=gap, res_primal=rp, res_dual=rd)  # noqa: E731
    flat = ps.ProgressStall(fo_obj=1.0, tol=1e-6, window=3)
    assert [flat(info(0.5, 1e-9, 1e-5, 1e-5)) for _ in range(5)] == [False, False, False, True, True]
    moving = ps.ProgressStall(fo_obj=1.0, tol=1e-6, window=3)
    assert not any(moving(info(0.5 + 1e-4 * k, 1e-9, 1e-5, 1e-5)) for k in range(8))
    falling = ps.ProgressStall(fo_obj=1.0, tol=1e-6, window=3)
    assert not any(falling(info(0.5, 1e-9, 1e-5, 10.0 ** -k)) for k in range(8))
    wide_gap = ps.ProgressStall(fo_obj=1.0, tol=1e-6, window=3)
    assert not any(wide_gap(info(0.5, 1e-3, 1e-5, 1e-5)) for _ in range(8))
    nan = ps.ProgressStall(fo_obj=1.0, tol=1e-6, window=1)
    assert not any(nan(info(math.nan, 0.0, 1.0, 1.0)) for _ in range(4))


def test_progress_stall_ends_a_solve_that_crawls_far_from_its_optimum():
    """From CRAWL_AFTER iterations on: True (`crawled`, not `fired`) once neither residual fell below CRAWL_FALL of
    its value CRAWL_WINDOW iterations before while the duality gap is above CRAWL_GAP x the first-order gap; a solve
    whose residual still falls, or whose gap is small, runs on."""
    info = lambda p, gap, rp, rd: SimpleNamespace(cost_primal=-p, gap_abs=gap, res_primal=rp, res_dual=rd)  # noqa: E731
    n = ps.CRAWL_AFTER + ps.CRAWL_WINDOW
    stuck = ps.ProgressStall(fo_obj=1.0)
    out = [stuck(info(0.5 + 1e-3 * k, 0.1, 0.2, 1e6)) for k in range(n)]  # the primal moves: no stall
    assert out.index(True) == max(ps.CRAWL_AFTER, ps.CRAWL_WINDOW) and stuck.crawled and not stuck.fired
    falling = ps.ProgressStall(fo_obj=1.0)
    assert not any(falling(info(0.5 + 1e-3 * k, 0.1, 0.2 * 0.97 ** k, 1e6)) for k in range(n))
    close = ps.ProgressStall(fo_obj=1.0)
    assert not any(close(info(0.5 + 1e-3 * k, 1e-5, 0.2, 1e6)) for k in range(n))


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_a_solve_ended_early_still_certifies_a_sound_bound(norm):
    """The stop decides how tight the bound is, never whether it holds: a solve ended after a few iterations by a
    callback that always says stop gives a finite weak-duality bound >= the best feasible value, looser than the
    solve's own end."""
    rng = np.random.default_rng(3)
    p = random_head_problem(rng, d=6, d_head=3, n=30, radius=0.05, norm=norm, mode="varying")
    fo = first_order_certificate(p)
    D = VaryingData(p, reduced_geometry(p), fo, center="key").drop_negligible()
    edges = vl.start_edges(D) if norm == "linf" else None
    cuts = all_keys_shift_cut(D, p.W_Q)
    prog = vlp.build_long_program(D, p.W_Q, False, MONOTONE_POINTS, True, edges, shift_cuts=cuts)
    calls = []
    early = lambda info: calls.append(info.iterations) or len(calls) >= 3  # noqa: E731
    status, _, x, z, _ = vl.solve_scaled(prog, vl.LONG_LADDER[0], D, early)
    assert status == "stalled" and len(calls) == 3 and z is not None
    bound, _ = vl.free_dual_bound(prog, z)
    _, _, _, z_end, _ = vl.solve_scaled(prog, vl.LONG_LADDER[0], D)
    end, _ = vl.free_dual_bound(prog, z_end)
    best = max(best_feasible_ascent(p, restarts=4, steps=60).value, sampled_max(p, k=16))
    assert math.isfinite(bound) and D.g0 + D.rho_o * bound + D.tail >= best
    assert bound >= end


def test_a_later_round_solves_each_attempt_once(monkeypatch):
    """Later rounds put the round's best attempt first and walk the others after it, each once: with no attempt
    ever accepted (ACCEPT 0, ROUGH and ROUGH_FIRST -inf, WALK_STOP and WALK_SHARE -inf) every round walks the whole
    ladder (above BESIDE_MAX tokens: ATTEMPTS_WIDE), and no (program, settings, tau_exp) repeats but the first
    round's first attempt, solved rough once and then out (when its rough stop ended it)."""
    p = random_head_problem(np.random.default_rng(4), d=6, d_head=3, n=24, radius=0.02, norm="linf", mode="varying")
    monkeypatch.setattr(vl, "ACCEPT", 0.0)
    for name in ("ROUGH", "ROUGH_FIRST", "WALK_STOP"):
        monkeypatch.setattr(vl, name, -math.inf)
    monkeypatch.setattr(ws, "WALK_SHARE", -math.inf)
    monkeypatch.setattr(vl, "BESIDE_MAX", 0)
    monkeypatch.setattr(vl, "ROUGH_ABOVE", 0)
    seen = []
    solve = vl.solve_scaled

    def recorded(prog, opts, D, stop=None):
        seen.append((prog.A.shape[0], prog.A.nnz, tuple(sorted(opts.items())), float(prog.coef["El"][0]), stop.tol))
        out = solve(prog, opts, D, stop)
        fired.append(stop.fired)
        return out

    fired = []
    monkeypatch.setattr(vl, "solve_scaled", recorded)
    res = vl.second_order_varying_long(p, reduced_geometry(p))
    rounds = {s[:2] for s in seen}
    assert res.rounds >= 2 and len(rounds) >= 2, (res.rounds, res.status)
    rough = [s[-1] == ps.ROUGH_STALL for s in seen]
    assert rough[0] and not any(rough[1:]) and len(seen) == len(set(seen))
    assert len(seen) - fired[0] == len(rounds) * len(vl.ATTEMPTS_WIDE)
    assert not fired[0] or seen[1][:4] == seen[0][:4]  # solved out: the same attempt at once


def test_a_round_with_cuts_to_add_ends_at_a_rough_point(monkeypatch):
    """A round that is not the last ends at its first attempt within ROUGH of its primal when that point has cuts to
    add; the last round walks the ladder (never accepted: ACCEPT 0, WALK_STOP and WALK_SHARE -inf). With every point
    rough enough (ROUGH and ROUGH_FIRST inf): one solve in each round but the last, the whole ladder in the last,
    and the bound stays above the best ascent."""
    p = random_head_problem(np.random.default_rng(4), d=6, d_head=3, n=24, radius=0.02, norm="linf", mode="varying")
    monkeypatch.setattr(vl, "ACCEPT", 0.0)
    monkeypatch.setattr(vl, "ROUGH", math.inf)
    monkeypatch.setattr(vl, "ROUGH_FIRST", math.inf)
    monkeypatch.setattr(vl, "WALK_STOP", -math.inf)
    monkeypatch.setattr(ws, "WALK_SHARE", -math.inf)
    monkeypatch.setattr(vl, "BESIDE_MAX", 0)
    monkeypatch.setattr(vl, "ROUGH_ABOVE", 0)
    seen = []
    solve = vl.solve_scaled

    def recorded(prog, opts, D, stop=None):
        seen.append((prog.A.shape[0], prog.A.nnz))
        return solve(prog, opts, D, stop)

    monkeypatch.setattr(vl, "solve_scaled", recorded)
    res = vl.second_order_varying_long(p, reduced_geometry(p))
    per_round = [sum(1 for s in seen if s == r) for r in dict.fromkeys(seen)]
    assert res.rounds >= 2 and len(per_round) == res.rounds, (res.rounds, per_round)
    assert per_round[:-1] == [1] * (res.rounds - 1) and per_round[-1] == len(vl.ATTEMPTS_WIDE), per_round
    assert res.value >= best_feasible_ascent(p, restarts=4, steps=60).value


def _recorded_solves(monkeypatch) -> list:
    """`solve_scaled` wrapped: per solve (rows, nonzeros, the progress stop's tolerance, certified bound)."""
    seen = []
    solve, bound_of = vl.solve_scaled, vl.free_dual_bound

    def recorded(prog, opts, D, stop=None):
        seen.append([prog.A.shape[0], prog.A.nnz, stop.tol, math.inf])
        return solve(prog, opts, D, stop)

    def bounded(prog, z):
        bound, zr = bound_of(prog, z)
        seen[-1][3] = bound
        return bound, zr

    monkeypatch.setattr(vl, "solve_scaled", recorded)
    monkeypatch.setattr(vl, "free_dual_bound", bounded)
    return seen


def test_the_first_solve_is_rough_and_its_round_solved_out_when_it_has_nothing_to_cut(monkeypatch):
    """The first round's first attempt stops at ROUGH_STALL; when its point has nothing to cut (CUT_STOP inf) the
    same program is solved again with the full stop (STALL) and that round is the last: the certificate never
    rests on a rough solve alone. Without cuts to add the bound stays above the best ascent."""
    p = random_head_problem(np.random.default_rng(4), d=6, d_head=3, n=24, radius=0.02, norm="linf", mode="varying")
    monkeypatch.setattr(vl, "CUT_STOP", math.inf)
    monkeypatch.setattr(vl, "BESIDE_MAX", 0)
    monkeypatch.setattr(vl, "ROUGH_ABOVE", 0)
    seen = _recorded_solves(monkeypatch)
    res = vl.second_order_varying_long(p, reduced_geometry(p))
    assert [s[2] for s in seen][:2] == [ps.ROUGH_STALL, ps.STALL], seen
    assert all(s[2] == ps.STALL for s in seen[1:]) and {tuple(s[:2]) for s in seen} == {tuple(seen[0][:2])}
    assert res.rounds == 1 and res.value >= best_feasible_ascent(p, restarts=4, steps=60).value


def test_the_last_round_walks_on_only_while_an_attempt_lowers_the_bound(monkeypatch):
    """With ACCEPT 0, WALK_SHARE -inf and WALK_STOP inf the last round (ROUNDS 1) ends at its first attempt after
    the first that does not lower the round's bound: every attempt before it lowered it. With WALK_STOP -inf the same
    unit walks the whole ladder (ATTEMPTS_WIDE above BESIDE_MAX tokens), so the first run ended early because of
    WALK_STOP."""
    p = random_head_problem(np.random.default_rng(4), d=6, d_head=3, n=24, radius=0.02, norm="linf", mode="varying")
    monkeypatch.setattr(vl, "ACCEPT", 0.0)
    monkeypatch.setattr(vl, "ROUNDS", 1)
    monkeypatch.setattr(vl, "BESIDE_MAX", 0)
    monkeypatch.setattr(vl, "ROUGH_ABOVE", 0)
    monkeypatch.setattr(vl, "WALK_STOP", math.inf)
    monkeypatch.setattr(ws, "WALK_SHARE", -math.inf)
    seen = _recorded_solves(monkeypatch)
    vl.second_order_varying_long(p, reduced_geometry(p))
    bounds = [s[3] for s in seen]
    assert all(b < min(bounds[:i]) for i, b in enumerate(bounds[1:-1], start=1)), bounds
    assert len(bounds) == len(vl.ATTEMPTS_WIDE) or bounds[-1] >= min(bounds[:-1]), bounds
    monkeypatch.setattr(vl, "WALK_STOP", -math.inf)
    seen.clear()
    vl.second_order_varying_long(p, reduced_geometry(p))
    assert len(seen) == len(vl.ATTEMPTS_WIDE) > len(bounds), (len(seen), bounds)


def test_the_last_round_walks_on_only_while_it_could_win_more_than_its_share(monkeypatch):
    """The walk's share rule (`walk_share`): with ACCEPT 0 and WALK_STOP -inf the last round (ROUNDS 1) ends at its
    first attempt (it ends optimal on this unit) when WALK_SHARE is inf (one ascent, run once), and walks the whole
    ladder when it is -inf or when no status is trusted, so the rule and its status gate are what ended the first
    run; with ACCEPT inf no walk is weighed and no ascent runs. Every bound stays above the best ascent."""
    p = random_head_problem(np.random.default_rng(0), d=6, d_head=3, n=24, radius=0.02, norm="linf", mode="varying")
    monkeypatch.setattr(vl, "ROUNDS", 1)
    monkeypatch.setattr(vl, "BESIDE_MAX", 0)
    monkeypatch.setattr(vl, "ROUGH_ABOVE", 0)
    monkeypatch.setattr(vl, "WALK_STOP", -math.inf)
    ascents = []
    monkeypatch.setattr(vl, "feasible_objective", lambda *a: ascents.append(a) or ws.feasible_objective(*a))
    seen = _recorded_solves(monkeypatch)
    best = best_feasible_ascent(p, restarts=4, steps=60).value
    whole = len(vl.ATTEMPTS_WIDE)
    for accept, share, trusted, solves, n_ascents in ((0.0, math.inf, ws.PRIMAL_TRUSTED, 1, 1),
                                                      (0.0, math.inf, (), whole, 1),
                                                      (0.0, -math.inf, ws.PRIMAL_TRUSTED, whole, 1),
                                                      (math.inf, -math.inf, ws.PRIMAL_TRUSTED, 1, 0)):
        monkeypatch.setattr(vl, "ACCEPT", accept)
        monkeypatch.setattr(ws, "WALK_SHARE", share)
        monkeypatch.setattr(ws, "PRIMAL_TRUSTED", trusted)
        seen.clear(), ascents.clear()
        assert vl.second_order_varying_long(p, reduced_geometry(p)).value >= best
        assert (len(seen), len(ascents)) == (solves, n_ascents), (accept, share, trusted)


def test_cutting_rounds_go_on_past_ROUNDS_only_while_the_last_one_paid(monkeypatch):
    """With cuts always left (CUT_STOP -inf) the rounds end at ROUNDS when no round can pay (ROUND_SHARE inf; this
    head's solves end with trusted statuses, else a round counts as paid) and at MAX_ROUNDS when every round does
    (ROUND_SHARE -inf); the bound stays above the best ascent either way."""
    p = random_head_problem(np.random.default_rng(0), d=6, d_head=3, n=24, radius=0.02, norm="linf", mode="varying")
    monkeypatch.setattr(vl, "BESIDE_MAX", 0)
    monkeypatch.setattr(vl, "ROUGH_ABOVE", 0)
    monkeypatch.setattr(vl, "CUT_STOP", -math.inf)
    monkeypatch.setattr(vl, "ROUNDS", 3)
    monkeypatch.setattr(vl, "MAX_ROUNDS", 5)
    best = best_feasible_ascent(p, restarts=4, steps=60).value
    for share, rounds in ((math.inf, 3), (-math.inf, 5)):
        monkeypatch.setattr(ws, "ROUND_SHARE", share)
        res = vl.second_order_varying_long(p, reduced_geometry(p))
        assert res.rounds == rounds and res.value >= best, (share, res.rounds)


def test_round_paid_needs_two_rounds_and_a_feasible_value_below_the_bound():
    """`walk_share.round_paid`: the last round paid when its primal fell by more than ROUND_SHARE (bound -
    feasible) below the round before's; never with one round, no estimate or a feasible value not below the bound;
    always (with an estimate) where either primal is from a solve that ended in an error or insufficient progress."""
    share, ok = ws.ROUND_SHARE, ws.PRIMAL_TRUSTED[0]
    assert ws.round_paid([(3.0, 2.0, ok), (2.0, 2.0 - 2.0 * share, ok)], 1.0)
    assert not ws.round_paid([(3.0, 2.0, ok), (2.0, 2.0 - 0.5 * share, ok)], 1.0)
    assert not ws.round_paid([(2.0, 1.0, ok)], 0.0) and not ws.round_paid([(3.0, 2.0, ok), (2.0, 1.0, ok)], None)
    for feasible in (2.0, 5.0, -math.inf, math.nan):
        assert not ws.round_paid([(3.0, 2.0, ok), (2.0, 1.0, ok)], feasible)
    for before, last in ((ok, "solver_error"), ("insufficient_progress", ok), ("", "")):
        assert ws.round_paid([(3.0, 2.0, before), (2.0, 2.0, last)], 0.0), (before, last)
        assert not ws.round_paid([(3.0, 2.0, before), (2.0, 2.0, last)], None), (before, last)
    assert not ws.round_paid([(3.0, 2.0, ok), (2.0, 2.0, ws.PRIMAL_TRUSTED[-1])], 0.0)


def test_walk_won_needs_a_feasible_value_below_the_bound_and_a_trusted_primal():
    """`walk_share.walk_won`: no estimate (a feasible value not below the bound, or not finite) never ends a walk,
    nor does a primal from a solve that ended in an error or insufficient progress; otherwise the walk ends exactly
    when bound - primal <= WALK_SHARE (bound - feasible)."""
    share = ws.WALK_SHARE
    for status in ws.PRIMAL_TRUSTED:
        assert ws.walk_won(1.0, 1.0 - 0.5 * share, 0.0, status)
        assert not ws.walk_won(1.0, 1.0 - 2.0 * share, 0.0, status)
    for status in ("solver_error", "user_limit", "infeasible_inaccurate", ""):
        assert not ws.walk_won(1.0, 1.0, 0.0, status)
    for feasible in (1.0, 2.0, -math.inf, math.nan):
        assert not ws.walk_won(1.0, 1.0, feasible, "optimal")
    assert not ws.walk_won(1.0, math.nan, 0.0, "optimal") and not ws.walk_won(math.inf, 1.0, 0.0, "optimal")


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_the_builds_memo_gives_the_programs_bit_for_bit(norm):
    """`build_long_program` with a memo kept across a unit's builds (its budgets, shift cuts' Lambda', support rows)
    gives every program bit for bit as a build without it does: what `attncert.audit` rebuilds."""
    rng = np.random.default_rng(5)
    p = random_head_problem(rng, d=6, d_head=3, n=30, radius=0.05, norm=norm, mode="varying")
    D = VaryingData(p, reduced_geometry(p), first_order_certificate(p), center="key").drop_negligible()
    edges = vl.start_edges(D) if norm == "linf" else None
    cuts = all_keys_shift_cut(D, p.W_Q)
    support = [0.3, -1.2] if norm == "linf" else []
    memo = {}
    more = cuts + [(rng.uniform(0, 1, D.n - 1), rng.standard_normal((3, 3)))]
    builds = [(cuts, support, 0), (cuts, support, 5), (more, support + [0.7] if support else [], -5)]
    for c, t, tau_exp in builds:
        a = vlp.build_long_program(D, p.W_Q, False, MONOTONE_POINTS, True, edges, tau_exp, c, t, memo)
        b = vlp.build_long_program(D, p.W_Q, False, MONOTONE_POINTS, True, edges, tau_exp, c, t)
        for name in ("c", "b", "lo", "hi", "cut_lams"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert (a.A != b.A).nnz == 0 and a.dims == b.dims
    kinds = [k[0] for k in memo if isinstance(k, tuple)]
    assert kinds.count("cut") == 3 and "budgets" in memo and kinds.count("support") == (3 if norm == "linf" else 0)
