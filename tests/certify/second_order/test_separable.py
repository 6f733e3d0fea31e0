"""The separable fixed-query certificate (`second_order.fixed_query.separable`): sound for any dual, sound and tight on
random heads with up to 256 keys, and equal to the monolithic relaxation up to the solver's accuracy."""
import math
import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import attncert.certify.second_order.fixed_query.separable as sep
from attncert.certify.exact_worst_case import exact_worst_case
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.second_order.certificate import second_order_certificate
from attncert.certify.second_order.fixed_query.monolithic import (
    _to_g,
    prepared_data,
    relaxation_data,
    second_order_fixed,
)
from attncert.certify.second_order.fixed_query.support_bound import bound_from_dual, unit_generators
from attncert.certify.second_order.fixed_query.token_family import FAMILY_ABOVE
from attncert.certify.second_order.fixed_query.token_program import build_program
from attncert.certify.second_order.fixed_query.token_solve import _cone_cuts
from attncert.head.problem import random_head_problem
from attncert.head.reduced_geometry import reduced_geometry

from head_strategies import sampled_max  # tests/head_strategies.py

SETTINGS = dict(suppress_health_check=[HealthCheck.too_slow], derandomize=True)
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@st.composite
def long_heads(draw, max_n=256):
    seed = draw(st.integers(0, 10_000))
    n = draw(st.sampled_from([2, 5, 17, 49, 96, max_n]))
    radius = 10 ** draw(st.floats(-3.5, -0.5))
    return random_head_problem(np.random.default_rng(seed), d=draw(st.integers(2, 8)), d_head=draw(st.integers(1, 4)),
                               n=n, radius=radius, norm=draw(st.sampled_from(["linf", "l2"])),
                               scale=draw(st.floats(0.3, 1.5)))


@settings(max_examples=24, **SETTINGS)
@given(long_heads(), st.booleans())
def test_separable_sound_and_below_first_order(problem, tight):
    ex = exact_worst_case(problem)
    res = sep.second_order_separable(problem, reduced_geometry(problem), upper_cone=tight)
    assert math.isfinite(res.value)
    assert res.value >= ex.hi - 1e-9 * (1.0 + ex.value_spread)  # sound against the certified exact bracket
    assert res.value >= sampled_max(problem, k=16)
    fo = first_order_certificate(problem)
    assert res.value <= fo + 1e-12 * (1.0 + abs(fo))


def test_bound_from_any_dual_is_sound():
    """The bound needs no solver: random dual vectors (repaired into the dual cone) give sound bounds."""
    rng = np.random.default_rng(3)
    for n, norm in ((3, "linf"), (60, "l2"), (60, "linf")):
        problem = random_head_problem(rng, d=5, d_head=3, n=n, radius=0.05, norm=norm)
        ex = exact_worst_case(problem)
        D = relaxation_data(problem, reduced_geometry(problem))
        prog = build_program(D, True, 7)
        gens = unit_generators(D, norm)
        for _ in range(20):
            z = rng.standard_normal(prog.b.size) * 10 ** rng.uniform(-3, 1)
            z[prog.families["norm"][0]] = rng.uniform(-2, 2)
            bound, zr = bound_from_dual(prog, z, gens, norm)
            assert _to_g(bound, D) >= ex.hi - 1e-9 * (1.0 + ex.value_spread)


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_family_path_matches_the_monolithic_relaxation(norm):
    """Above FAMILY_ABOVE keys the duals come from the family of token programs; the bound stays within a few
    percent of the gap of the monolithic program's (same relaxation, the facets of P used exactly)."""
    rng = np.random.default_rng(11)
    problem = random_head_problem(rng, d=8, d_head=4, n=80, radius=0.02, norm=norm)
    ex = exact_worst_case(problem)
    mono = second_order_fixed(problem, reduced_geometry(problem))
    fam = sep.second_order_separable(problem, reduced_geometry(problem))
    assert not fam.fallback and not mono.fallback
    gap_fam, gap_mono = fam.value - ex.hi, mono.value - ex.hi
    assert gap_fam >= -1e-9 * (1.0 + ex.value_spread)
    assert gap_fam <= 1.1 * gap_mono + 1e-9 * (1.0 + ex.value_spread)


def test_dispatch_uses_the_separable_path_for_long_contexts():
    rng = np.random.default_rng(5)
    problem = random_head_problem(rng, d=6, d_head=3, n=FAMILY_ABOVE + 1, radius=0.01)
    res = second_order_certificate(problem)
    ex = exact_worst_case(problem)
    # the family path's two passes, or the joint token program beside it (few kept tokens) when smaller
    assert res.value >= ex.hi and (res.rounds == 2 or "joint token program" in res.status)


@pytest.mark.parametrize("radius,scale", [(1e-7, 1.0), (1e-4, 0.1), (1.0, 1.0), (3.0, 6.0)])
@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_separable_finite_and_sound_at_extreme_radii_and_scales(radius, scale, norm):
    """Tiny score widths (deviation form), score widths beyond the representable band (labelled fallback) and
    large weights: a finite value above every attained one, never an exception."""
    problem = random_head_problem(np.random.default_rng(2), d=5, d_head=3, n=80, radius=radius, norm=norm,
                                  scale=scale)
    ex = exact_worst_case(problem)
    for tight in (False, True):
        res = sep.second_order_separable(problem, reduced_geometry(problem), upper_cone=tight)
        assert math.isfinite(res.value) and res.value >= ex.lo - 1e-9 * (1.0 + ex.value_spread)
        assert not res.fallback or res.status.startswith("fallback")


_EXTREMES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-320, -1e-320, 5e-324, 1e-300, -1e10, 1e10, 1e307, -1e307,
             1.7e308, -1.7e308, 1e200, -1e200, 1.0, -1.0]


@pytest.fixture(scope="module")
def dual_targets():
    """(program, generators, norm, data, certified exact upper end, tolerance) for small heads, both variants."""
    rng = np.random.default_rng(4)
    out = []
    for n, norm, radius in ((3, "linf", 0.05), (7, "l2", 0.05), (5, "linf", 1e-5)):
        problem = random_head_problem(rng, d=5, d_head=3, n=n, radius=radius, norm=norm)
        ex = exact_worst_case(problem)
        D = relaxation_data(problem, reduced_geometry(problem))
        for tight in (False, True):
            out.append((build_program(D, tight, 7), unit_generators(D, norm), norm, D, ex.hi,
                        1e-9 * (1.0 + ex.value_spread)))
    return out


@settings(max_examples=150, **SETTINGS)
@given(st.data())
def test_bound_from_extreme_duals_is_sound_and_never_raises(dual_targets, data):
    """NaN, +-inf, subnormal and near-overflow entries, and exponential-cone pairs whose ratio underflows or
    overflows (e.g. u = -1e10, w = 1e-320): a sound finite bound or +inf, never an exception."""
    prog, gens, norm, D, hi, tol = data.draw(st.sampled_from(dual_targets))
    entry = st.one_of(st.sampled_from(_EXTREMES), st.floats(allow_nan=True, allow_infinity=True),
                      st.floats(-3.0, 3.0))
    z = np.array(data.draw(st.lists(entry, min_size=prog.b.size, max_size=prog.b.size)), dtype=np.float64)
    if data.draw(st.booleans()):  # every exponential cone's (u, w) set to one extreme pair
        u, w = data.draw(st.sampled_from([(-1e10, 1e-320), (-1e300, 1e-300), (-1e-320, 1e300), (-1e307, 1e307),
                                          (-5e-324, 5e-324), (-1.0, 1e-320)]))
        first_exp = prog.dims.zero + prog.dims.nonneg + sum(prog.dims.soc)
        z[first_exp::3] = u
        z[first_exp + 2::3] = w
    bound, zr = bound_from_dual(prog, z, gens, norm)
    assert bound == math.inf or math.isfinite(bound)
    assert not np.isnan(zr).any()
    assert _to_g(bound, D) >= hi - tol


def _dominant_head(seed: int):
    """80 keys (the long-context path), weights of scale 2.5: one or a few tokens carry the softmax, and most of the
    others are dropped as negligible (the path then solves one token program for the kept ones)."""
    rng = np.random.default_rng(seed)
    return random_head_problem(rng, d=8, d_head=4, n=80, radius=10 ** rng.uniform(-4, -2), norm="linf", scale=2.5)


@pytest.mark.parametrize("tight", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_long_context_path_as_tight_as_the_monolithic_program_on_dominant_token_heads(seed, tight):
    """The long-context path's gap is at most twice the monolithic program's, up to 1e-5 of the first-order gap
    (the solvers' resolution)."""
    _assert_within_twice_the_monolithic_gap(_dominant_head(seed), tight, slack=1e-5)


@pytest.mark.parametrize("tight", [False, True])
def test_no_fallback_at_a_weight_band_of_e14_where_the_monolithic_program_certifies(tight):
    """R_s = 7 (weight band e^14), 64 keys, GPT-2-sized: every interior-point rung of the token solves fails; the
    long-context path certifies anyway (the refining LPs start from the last dual iterate; the joint token program
    beside the family), as the monolithic program does, within twice its gap. Fell back before the rescue."""
    from bench.long_context_regimes import unit

    problem = unit(1, 64, "linf", 0.14, "Rs", 7.0)
    ex = exact_worst_case(problem)
    mono = second_order_fixed(problem, reduced_geometry(problem), upper_cone=tight)
    long = sep.second_order_separable(problem, reduced_geometry(problem), upper_cone=tight)
    assert not mono.fallback and not long.fallback
    assert long.value >= ex.hi - 1e-9 * (1.0 + ex.value_spread)
    assert long.value - ex.hi <= 2.0 * (mono.value - ex.hi)


def _dominant_family_head(seed: int, norm: str):
    """100 keys, all kept (the token family), one of them lifted by 8 in score: it carries 80-97% of the softmax
    weight, the others sit at value offsets thousands of times the optimum's."""
    rng = np.random.default_rng(seed)
    problem = random_head_problem(rng, d=8, d_head=4, n=100, radius=10 ** rng.uniform(-4, -2.5), norm=norm, scale=0.5)
    direction = problem.W_K @ problem.nominal_query() / np.sqrt(problem.d_head)
    Z0 = problem.Z0.copy()
    Z0[0] += 8.0 * direction / (direction @ direction)
    return replace(problem, Z0=Z0)


def _assert_within_twice_the_monolithic_gap(problem, tight: bool, slack: float = 1e-6):
    """Neither path falls back, the long-context path is sound against the exact value and its gap is at most
    twice the monolithic program's, up to `slack` of the first-order gap."""
    ex = exact_worst_case(problem)
    fo = first_order_certificate(problem)
    long = sep.second_order_separable(problem, reduced_geometry(problem), upper_cone=tight)
    mono = second_order_fixed(problem, reduced_geometry(problem), upper_cone=tight)
    assert not long.fallback and not mono.fallback
    gap_long, gap_mono = long.value - ex.hi, mono.value - ex.hi
    assert gap_long >= -1e-9 * (1.0 + ex.value_spread)
    assert gap_long <= 2.0 * gap_mono + slack * (fo - ex.hi)


@pytest.mark.parametrize("tight", [False, True])
@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("seed", range(3))
def test_token_family_as_tight_as_the_monolithic_program_on_dominant_token_heads(seed, norm, tight):
    """Through the token family (more than FAMILY_ABOVE kept tokens), with one token carrying most of the weight:
    the gap is at most twice the monolithic program's, up to 1e-6 of the first-order gap."""
    problem = _dominant_family_head(seed, norm)
    _, D, early = prepared_data(problem, reduced_geometry(problem), time.perf_counter())
    assert early is None and D.A.size > FAMILY_ABOVE
    _assert_within_twice_the_monolithic_gap(problem, tight)


@settings(max_examples=60, **SETTINGS)
@given(st.sampled_from(["exp", "soc"]), st.lists(st.floats(-30.0, 30.0), min_size=3, max_size=3),
       st.lists(st.floats(-30.0, 30.0), min_size=3, max_size=3))
def test_cone_cut_is_a_supporting_half_space_that_cuts_off_the_point(kind, s, p):
    """A cut of the outer-approximation LP (`token_solve._cone_cuts`) is a normal y of the dual cone: y^T s' >= 0
    for every point s' of the cone (here one point built from p), and y^T s < 0 at the violating slack s."""
    S = np.array([s])
    mask, Y = _cone_cuts(kind, S, 1e-12)
    if kind == "exp":
        with np.errstate(over="ignore"):
            outside = not (S[0, 1] > 0 and S[0, 1] * np.exp(S[0, 0] / S[0, 1]) <= S[0, 2])
        y_pos = abs(p[1]) + 0.1  # a point of the cone: (x, y, y e^{x/y} + slack)
        point = np.array([p[0], y_pos, y_pos * math.exp(p[0] / y_pos) + abs(p[2])])
    else:
        outside = np.linalg.norm(S[0, 1:]) > S[0, 0]
        point = np.array([np.hypot(p[1], p[2]) + abs(p[0]), p[1], p[2]])
    if not mask[0]:
        return
    assert outside  # a cut only for a point outside the cone
    y = Y[0]
    assert np.all(np.isfinite(y)) and float(y @ S[0]) < 0.0
    assert float(y @ point) >= -1e-9 * float(np.abs(y) @ np.abs(point))


@pytest.mark.parametrize("tight", [False, True])
@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_kept_certificate_of_the_token_family_re_derives_the_reported_value(norm, tight):
    """The certificate the record keeps for a token-family bound is one of the unit's own token program (not of
    the family's grid programs, whose bounds only rank their duals), and the audit's arithmetic
    (`support_duality.support_bound_upper` on the rebuilt program) re-derives the reported value from it."""
    from flint import arb

    from attncert.audit.support_duality import support_bound_upper
    from attncert.certify.certificate_store import bare_program
    from attncert.certify.second_order.dual_bound.dual_record import recording_duals

    problem = _dominant_family_head(1, norm)
    with recording_duals() as rec:
        res = sep.second_order_separable(problem, reduced_geometry(problem), upper_cone=tight)
    assert not res.fallback
    cert = rec.best
    D = cert.construction["data"]
    assert cert.kind == "support" and cert.prog.n == D.A.size > FAMILY_ABOVE
    assert cert.value == res.value
    prog, z = bare_program(cert)
    bound = support_bound_upper(prog, z, D.u_s, D.u_w, D.radius, D.R_s, D.rho_w, norm)
    origin, scale, tail = cert.affine
    assert float((arb(res.value) - (arb(origin) + arb(scale) * bound + arb(tail))).lower()) >= 0.0


@settings(max_examples=6, **SETTINGS)
@given(st.integers(3, 10_000), st.sampled_from(["linf", "l2"]), st.booleans())
def test_property_token_family_within_twice_the_monolithic_gap_on_dominant_token_heads(seed, norm, tight):
    """Property form of the dominant-token comparison: any seed, either norm and variant, the long-context path
    (token family) is sound and its gap is at most twice the monolithic program's (up to 1e-6 of the first-order
    gap), and neither falls back."""
    problem = _dominant_family_head(seed, norm)
    _assert_within_twice_the_monolithic_gap(problem, tight)


@settings(max_examples=6, **SETTINGS)
@given(long_heads(max_n=96), st.sampled_from(["separable", "fixed"]))
def test_property_tight_never_above_paper_like_on_either_path(problem, path):
    """The tight relaxation is a subset of the paper-like one, so the tight variant's bound is never above the
    paper-like bound of the same unit, on either path, at any half-width."""
    from attncert.certify.second_order.certificate import fixed_query_certificate

    if path == "fixed" and problem.n > 64:
        problem = replace(problem, Z0=problem.Z0[:64], query_index=min(problem.query_index, 63))
    paper = fixed_query_certificate(problem, False, path=path)
    tight = fixed_query_certificate(problem, True, path=path)
    assert tight.value <= paper.value


def test_support_reuse_is_the_computed_value():
    """A support function asked again with bit-for-bit the same inputs is the computed one, and a caller that
    modifies its result does not change what the next call returns."""
    from attncert.certify.second_order.fixed_query import support_bound as sb

    rng = np.random.default_rng(3)
    gens = rng.standard_normal((2, 40))
    a, b = rng.standard_normal(25), rng.standard_normal(25)
    for norm in ("linf", "l2"):
        h0, e0 = sb._support_product(a, b, gens, norm)
        h1, e1 = sb._support(a, b, gens, norm)
        h1[:] = -1.0
        e1[:] = -1.0
        h2, e2 = sb._support(a.copy(), b.copy(), gens.copy(), norm)
        assert np.array_equal(h2, h0) and np.array_equal(e2, e0)
        b2 = b.copy()
        b2[7] = np.nextafter(b2[7], np.inf)  # one ulp apart: computed again, not reused
        h3, _ = sb._support(a, b2, gens, norm)
        assert np.array_equal(h3, sb._support_product(a, b2, gens, norm)[0])
    assert np.array_equal(sb._support(a, b, gens, "l2")[0], sb._support_product(a, b, gens, "l2")[0])
    assert not np.array_equal(sb._support(a, b, gens, "l2")[0], sb._support(a, b, gens, "linf")[0])
