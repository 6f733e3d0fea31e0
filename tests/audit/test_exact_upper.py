"""The audit of the exact solver's upper end (`attncert.audit.exact_upper`): F(hi) < 0 in ball arithmetic.

* It passes at the exact solver's hi (inputs: the reduction's floats with their error bounds as radii)
  and fails below the maximum (lo - 1e-6 spread, the nominal value at a large radius): a check that
  cannot fail would be worthless.
* Per token, the bounds are compared with an independent brute force in arb: linf, every vertex and
  every edge's stationary point of the cube's image (all 2^d sign vectors, no vertex chain); l2, the
  support points r G n / sqrt(n^T G n) of a dense set of normals n (no Cholesky factor). Each bound is
  >= every value found and within 1e-25 of the largest (tight, not only sound).
* Soundness on random t: a pass at t never comes with a feasible value >= t.
* The audit modules import no solver.
"""
import dataclasses
import itertools
import subprocess
import sys
import time

import numpy as np
import pytest
from flint import arb, ctx
from hypothesis import given, settings
from hypothesis import strategies as st

from attncert.audit.exact_upper import exact_upper_check, token_terms
from attncert.audit.planar_image import EllipseImage, ZonotopeImage
from attncert.certify.exact_worst_case import exact_worst_case
from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.problem import random_head_problem

SETTINGS = dict(derandomize=True, max_examples=60)


def balls(problem, exact=False):
    """(s0, w0, u_s, u_w) as arb balls: the float64 reduction with its error bounds as radii (or exact)."""
    red = fixed_query_reduction(problem)
    pairs = ((red.s0, red.err_s0), (red.w0, red.err_w0), (red.u_s, red.err_us), (red.u_w, red.err_uw))
    return tuple([arb(float(x)) if exact else arb(float(x), float(e)) for x, e in zip(v, err)] for v, err in pairs)


def solved(problem, exact=False):
    """(exact result, input balls, hints x0 = (u_s, u_w) . (witness - Z0))."""
    ex = exact_worst_case(problem)
    red = fixed_query_reduction(problem)
    D = ex.witness - problem.Z0
    return ex, balls(problem, exact), np.stack([D @ red.u_s, D @ red.u_w], axis=1)


def check(problem, inputs, t, x0=None):
    return exact_upper_check(*inputs, problem.radius, problem.norm, t, x0)


def unit(seed, norm, radius, n=4, d=5, scale=1.0):
    return random_head_problem(np.random.default_rng(seed), d=d, d_head=3, n=n, radius=radius, norm=norm, scale=scale)


# ----------------------------------------------------------------------------------------------
# passes at hi, fails below the maximum
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["linf", "l2"])
@settings(**SETTINGS)
@given(seed=st.integers(0, 10_000), log_r=st.floats(-4, 0.5), n=st.integers(1, 6), d=st.integers(2, 7),
       scale=st.floats(0.3, 2.0))
def test_passes_at_the_exact_upper_end_and_fails_below_the_maximum(norm, seed, log_r, n, d, scale):
    problem = unit(seed, norm, 10 ** log_r, n=n, d=d, scale=scale)
    ex, inputs, x0 = solved(problem)
    res = check(problem, inputs, ex.hi, x0)
    assert res.passed, (res, ex)
    assert res.margin > 0 and res.f_upper < 0 and res.reason == ""
    assert check(problem, inputs, ex.hi).passed  # the hints are not needed
    below = check(problem, inputs, ex.lo - 1e-6 * ex.value_spread, x0)
    assert not below.passed and below.f_upper > 0 and "not certified" in below.reason


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_fails_at_the_nominal_value_at_a_large_radius(norm):
    for seed in range(4):
        problem = unit(seed, norm, 0.5)
        ex, inputs, x0 = solved(problem)
        nominal = problem.nominal_value()
        assert ex.lo - nominal > 1e-3 * ex.value_spread
        assert not check(problem, inputs, nominal, x0).passed
        assert check(problem, inputs, ex.hi, x0).passed


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_tight_far_below_the_solvers_margins(norm):
    """With exact inputs the check resolves F to the working precision: it passes 1e-11 of the spread above
    the feasible value lo (the exact solver's own float64 margins are ~1e-14 to 1e-13 of it)."""
    for seed in range(6):
        problem = unit(seed, norm, [1e-4, 0.05, 1.0][seed % 3], n=5, d=6)
        ex, inputs, _ = solved(problem, exact=True)
        assert check(problem, inputs, ex.lo + 1e-11 * ex.value_spread).passed
        assert not check(problem, inputs, ex.lo - 1e-11 * ex.value_spread).passed


@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("radius", [1e-10, 1e-6, 3.0, 30.0])
def test_tiny_and_large_radii(norm, radius):
    problem = unit(7, norm, radius)
    ex, inputs, x0 = solved(problem)
    assert check(problem, inputs, ex.hi, x0).passed
    assert not check(problem, inputs, ex.lo - 1e-6 * ex.value_spread, x0).passed


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_one_token(norm):
    """n = 1: g = w_1, max g = w0 + R_w; hi passes, anything below the maximum fails."""
    for seed in range(3):
        problem = unit(seed, norm, 0.1, n=1)
        ex, inputs, x0 = solved(problem)
        assert check(problem, inputs, ex.hi, x0).passed
        assert not check(problem, inputs, ex.lo - 1e-9 * ex.value_spread, x0).passed


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_all_values_equal(norm):
    """W_V = 0: every token reads the same value w, g = w whatever the perturbation (u_w = 0)."""
    p = unit(3, norm, 0.2)
    problem = dataclasses.replace(p, W_V=np.zeros_like(p.W_V))
    ex, inputs, x0 = solved(problem)
    w = float(fixed_query_reduction(problem).w0[0])
    assert check(problem, inputs, ex.hi, x0).passed
    exact = balls(problem, exact=True)
    assert check(problem, exact, w + 1e-12 * (1 + abs(w))).passed
    assert not check(problem, exact, w - 1e-12 * (1 + abs(w))).passed


# ----------------------------------------------------------------------------------------------
# per-token bounds against brute force in arb
# ----------------------------------------------------------------------------------------------
def brute_linf(s, w, us, uw, r, t):
    """Ball containing max over the cube's image of e^{s + sigma}(w - t + omega): every vertex (2^d sign
    vectors) and the stationary point of every edge (one sign free), in arb."""
    d = len(us)
    best = None
    for signs in itertools.product((-1, 1), repeat=d):
        sig = sum((r * a if e > 0 else -(r * a) for a, e in zip(us, signs)), arb(0))
        om = sum((r * b if e > 0 else -(r * b) for b, e in zip(uw, signs)), arb(0))
        cands = [(s + sig).exp() * (w - t + om)]
        for i in range(d):  # the edge from this vertex flipping generator i (if it is a -1)
            if signs[i] > 0:
                continue
            ds, dw = 2 * r * us[i], 2 * r * uw[i]
            if not (ds * dw < 0):
                continue
            lam = -(w - t + om) / dw - 1 / ds
            if lam > 0 and lam < 1:
                cands.append((s + sig + ds * lam).exp() * (-dw / ds))
        for c in cands:
            best = c if best is None else best.max(c)
    return best


def brute_l2(s, w, us, uw, r, t, k=2048):
    """(largest value found, a refined largest value) over support points x(n) = r G n / sqrt(n^T G n)."""
    def value(theta):
        ns, nw = arb(theta).cos(), arb(theta).sin()
        v = [ns * a + nw * b for a, b in zip(us, uw)]
        norm = sum((x * x for x in v), arb(0)).sqrt()
        sig = r * sum((a * x for a, x in zip(us, v)), arb(0)) / norm
        om = r * sum((b * x for b, x in zip(uw, v)), arb(0)) / norm
        return (s + sig).exp() * (w - t + om)

    thetas = np.linspace(0, 2 * np.pi, k, endpoint=False)
    vals = [value(th) for th in thetas]
    i = int(np.argmax([float(v.mid()) for v in vals]))
    # golden section on the best cell, with arb angles and exact comparisons of the midpoints
    lo, hi = arb(thetas[i]) - 2 * arb.pi() / k, arb(thetas[i]) + 2 * arb.pi() / k
    g = (arb(5).sqrt() - 1) / 2
    a, b = lo + (1 - g) * (hi - lo), lo + g * (hi - lo)
    fa, fb = value(a.mid()), value(b.mid())
    for _ in range(150):
        if fa.mid() > fb.mid():
            hi, b, fb = b, a, fa
            a = lo + (1 - g) * (hi - lo)
            fa = value(a.mid())
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = value(b.mid())
    return vals, fa.max(fb)


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_token_bounds_are_sound_and_tight_against_brute_force(norm):
    old = ctx.prec
    ctx.prec = 128
    try:
        for seed in range(4):
            problem = unit(seed, norm, [0.05, 0.4][seed % 2], n=4, d=4)
            ex = exact_worst_case(problem)
            s0, w0, us, uw = balls(problem, exact=True)
            r = arb(problem.radius)
            image = ZonotopeImage(us, uw, r) if norm == "linf" else EllipseImage(us, uw, r)
            C = max(float(s.mid()) for s in s0)
            kinds = set()
            for t in (ex.lo, ex.lo - 0.2 * ex.value_spread, ex.hi + 0.1 * ex.value_spread):
                terms, notes, _ = token_terms(s0, w0, image, t)
                assert not notes
                for j, term in enumerate(terms):
                    s = s0[j] - C
                    if norm == "linf":
                        ref = brute_linf(s, w0[j], us, uw, r, arb(t))
                        found = [ref]
                    else:
                        found, ref = brute_l2(s, w0[j], us, uw, r, arb(t))
                    kinds.add(ref > 0)
                    scale = abs(ref).upper() + (s + r * 10).exp() * 1e-30
                    assert all(not (term < v) for v in found + [ref])  # sound: never below a value of P
                    assert term - ref < 1e-25 * scale, (j, t, term, ref)  # tight
            assert kinds == {True, False}  # both kinds of token were exercised
    finally:
        ctx.prec = old


# ----------------------------------------------------------------------------------------------
# soundness at random t, degenerate geometry, interface
# ----------------------------------------------------------------------------------------------
def sampled_values(problem, k=200, seed=0):
    rng = np.random.default_rng(seed)
    vals = [problem.nominal_value()]
    for _ in range(k):
        D = rng.standard_normal(problem.Z0.shape)
        D = problem.radius * (np.sign(D) if problem.norm == "linf" else D / np.linalg.norm(D, axis=1, keepdims=True))
        vals.append(problem.value(problem.Z0 + D))
    return np.array(vals)


@pytest.mark.parametrize("norm", ["linf", "l2"])
@settings(**SETTINGS)
@given(seed=st.integers(0, 10_000), log_r=st.floats(-3, 0), u=st.floats(-1.0, 0.2))
def test_never_passes_below_a_feasible_value(norm, seed, log_r, u):
    problem = unit(seed, norm, 10 ** log_r)
    ex, inputs, _ = solved(problem)
    t = ex.lo + u * ex.value_spread
    best = max(sampled_values(problem).max(), ex.lo)
    res = check(problem, inputs, t)
    assert not (res.passed and t <= best - 1e-12 * ex.value_spread), (t, best, res)
    assert res.passed == (res.f_upper < 0)


def test_parallel_generators_within_the_balls():
    """An undecided pair of generators keeps both orders (same bound as exact inputs); a run of three, or an
    undecidable orientation, bounds the negative tokens by 0 and says so."""
    rad = 1e-25
    s0, w0 = [0.3, -0.2, 0.1], [0.5, -1.0, 0.2]
    us, uw = [1.0, 1.0, 2.0, -0.5], [1.0, 1.0, -1.0, 0.7]
    r = 0.1
    hi = max(w0) + r * sum(abs(x) for x in uw) + 0.05  # every token negative: F(hi) < 0 by its whole size
    exact = exact_upper_check(s0, w0, us, uw, r, "linf", hi)
    pair = exact_upper_check(s0, w0, [arb(x, rad) for x in us], [arb(x, rad) for x in uw], r, "linf", hi)
    assert exact.passed and pair.passed and abs(pair.f_upper - exact.f_upper) < 1e-15 * abs(exact.f_upper)
    assert ZonotopeImage([arb(x, rad) for x in us], [arb(x, rad) for x in uw], arb(r)).chain()[1] == 1  # exercised
    us2, uw2 = [1.0, 1.0, 2.0, 2.0, -0.5], [1.0, 1.0, -1.0, -1.0, 0.7]  # two undecided pairs side by side
    two = exact_upper_check(s0, w0, [arb(x, rad) for x in us2], [arb(x, rad) for x in uw2], r, "linf", hi)
    assert two.passed and abs(two.f_upper - exact_upper_check(s0, w0, us2, uw2, r, "linf", hi).f_upper) < 1e-15
    us3, uw3 = [1.0, 1.0, 1.0, 2.0], [1.0, 1.0, 1.0, -1.0]
    triple = exact_upper_check(s0, w0, [arb(x, rad) for x in us3], [arb(x, rad) for x in uw3], r, "linf", hi)
    assert not triple.passed and "parallel" in triple.reason
    flat = exact_upper_check(s0, w0, [arb(0.0, rad)] + us[1:], uw, r, "linf", hi)
    assert not flat.passed and "orientation" in flat.reason
    # exact zeros are not ambiguous: a zero generator is dropped, a vertical one is oriented by u_w
    assert exact_upper_check(s0, w0, [0.0] + us, [0.0] + uw, r, "linf", hi).passed
    assert exact_upper_check(s0, w0, [0.0] + us, [0.5] + uw, r, "linf", hi).passed


def test_interface_precision_and_errors():
    problem = unit(1, "linf", 0.1)
    ex, inputs, x0 = solved(problem)
    before = ctx.prec
    res = exact_upper_check(*inputs, 0.1, "linf", ex.hi, x0, prec=200)
    assert ctx.prec == before and res.passed
    assert set(f.name for f in dataclasses.fields(res)) == {"passed", "f_upper", "scale", "margin", "reason",
                                                           "positive_tokens"}
    with pytest.raises(ValueError, match="norm"):
        exact_upper_check(*inputs, 0.1, "l1", ex.hi)
    with pytest.raises(ValueError, match="radius"):
        exact_upper_check(*inputs, 0.0, "linf", ex.hi)
    # plain floats are taken as exact balls
    red = fixed_query_reduction(problem)
    assert exact_upper_check(red.s0, red.w0, red.u_s, red.u_w, 0.1, "linf", ex.hi).passed


def test_the_audit_imports_no_solver():
    """At run time too: importing every audit module loads no torch and none of attncert's solving code (cvxpy,
    which canonicalizes the rebuilt programs, imports its solver interfaces itself; `test_trusted_base`). The
    baselines' and block stage's table code (pure pandas) is allowed: the summary tables are recomputed with it."""
    code = ("import sys, pkgutil, importlib, attncert.audit as a\n"
            "for m in pkgutil.iter_modules(a.__path__): importlib.import_module('attncert.audit.' + m.name)\n"
            "bad = ('torch', 'transformers', 'attncert.certify.second_order.dual_bound.solve_ladder',\n"
            "       'attncert.certify.second_order.dual_bound.weak_duality',\n"
            "       'attncert.certify.second_order.fixed_query.token_solve',\n"
            "       'attncert.certify.second_order.relaxation.cutting_planes', 'attncert.certify.exact_worst_case',\n"
            "       'attncert.certify.dinkelbach', 'attncert.certify.best_feasible_ascent', 'attncert.certify.run',\n"
            "       'attncert.baselines.linear_bound_baselines', 'attncert.baselines.head_network',\n"
            "       'attncert.baselines.layer', 'attncert.block.crown', 'attncert.block.certificate',\n"
            "       'attncert.block.residual', 'attncert.block.enclosure', 'attncert.block.map')\n"
            "print(sorted(m for m in sys.modules if m.startswith(bad)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


# ----------------------------------------------------------------------------------------------
# a model-sized unit: correctness asserted, time only printed
# ----------------------------------------------------------------------------------------------
def minilm_sized_unit(seed, radius, norm):
    """The benchmark's model-sized unit (d = 384, n = 8), from a seed."""
    from bench.bench_exact_upper import minilm_sized_unit as unit

    return unit(np.random.default_rng(seed), radius, norm)


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_model_sized_unit_prints_time_per_call(norm):
    problem = minilm_sized_unit(0, 0.01, norm)
    ex, inputs, x0 = solved(problem)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        res = check(problem, inputs, ex.hi, x0)
        times.append(time.perf_counter() - t0)
        assert res.passed, res
    assert not check(problem, inputs, ex.lo - 1e-6 * ex.value_spread, x0).passed
    print(f"\nexact_upper_check {norm}, n = 8, d = 384: {1e3 * min(times):.1f} ms per call (best of 3), "
          f"margin {res.margin:.2e}")
