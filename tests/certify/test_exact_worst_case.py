"""Exact fixed-query worst case: certified bracket vs independent brute force.

Brute force, by dimension:
* d = 2: a dense grid of each token's ball (boundary and interior), solved exactly as a finite
  substitution problem (`token_substitution_worst_case`, itself checked against full enumeration).
* linf, d = 3..6: every token's maximum of e^{s}(w - t) lies on an edge (1-face) of its cube; all
  edges are searched by golden section straight from the head formulas (no u_s, u_w, no zonotope),
  inside a plain Dinkelbach loop.
* l2, d = 3..6: multi-start L-BFGS over the product of spheres (the maximizer of each token's term
  is on its sphere unless u_w is parallel to u_s).
"""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from attncert.certify.exact_worst_case import exact_worst_case, exact_worst_case_min
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.head.problem import HeadProblem, random_head_problem
from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.projected_ball import Ellipse2D, Zonotope2D
from attncert.certify.token_substitutions import token_substitution_worst_case

SETTINGS = dict(derandomize=True)
GOLD = (np.sqrt(5.0) - 1.0) / 2.0


def make_problem(seed, norm, d_lo=2, d_hi=6, radius_hi=1.0):
    rng = np.random.default_rng(seed)
    return random_head_problem(rng, d=int(rng.integers(d_lo, d_hi + 1)), d_head=int(rng.integers(1, 4)),
                               n=int(rng.integers(1, 6)), radius=float(rng.uniform(0.02, radius_hi)), norm=norm,
                               scale=float(rng.uniform(0.5, 2.0)))


def sample_perturbations(P: HeadProblem, rng, k=300):
    """Feasible Delta (k, n, d): interior points, vertices / sphere points, and mixtures."""
    n, d, r = P.n, P.d, P.radius
    if P.norm == "linf":
        inner = rng.uniform(-r, r, (k, n, d))
        vert = rng.choice([-r, r], (k, n, d))
        mix = np.where(rng.random((k, n, d)) < 0.7, vert, inner)
        D = np.concatenate([inner, vert, mix])
    else:
        X = rng.standard_normal((2 * k, n, d))
        X *= r / np.linalg.norm(X, axis=2, keepdims=True)
        X[:k] *= rng.uniform(0, 1, (k, n, 1))
        D = X
    return D * (1 - 1e-12)


def values(P, D):
    return np.array([P.value(P.Z0 + Di) for Di in D])


# ------------------------------------------------------------------------------------------------
def _ball_grid(norm, r, m=3000, inner=25):
    s = np.linspace(-1, 1, m)
    if norm == "linf":
        one = np.ones(m)
        bd = np.concatenate([np.stack(p, 1) for p in ((s, one), (s, -one), (one, s), (-one, s))])
        g = np.linspace(-1, 1, inner)
        interior = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
    else:
        th = np.linspace(0, 2 * np.pi, 4 * m, endpoint=False)
        bd = np.stack([np.cos(th), np.sin(th)], 1)
        g = np.linspace(-1, 1, inner)
        interior = np.stack(np.meshgrid(g, g), -1).reshape(-1, 2)
        interior = interior[np.linalg.norm(interior, axis=1) <= 1]
    return r * np.concatenate([bd, interior]) * (1 - 1e-12)


@pytest.mark.slow
@settings(max_examples=24, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]))
def test_exact_matches_dense_grid_in_2d(seed, norm):
    P = make_problem(seed, norm, d_lo=2, d_hi=2, radius_hi=1.5)
    G = _ball_grid(norm, P.radius)
    cands = [P.Z0[j] + G for j in range(P.n)]
    for sense in ("max", "min"):
        ex = exact_worst_case(P, sense)
        grid = token_substitution_worst_case(P, cands, sense).value
        tol = 1e-6 * ex.value_spread
        if sense == "max":
            assert grid <= ex.hi and grid >= ex.lo - tol
        else:
            assert grid >= ex.lo and grid <= ex.hi + tol


def _box_face_max(P: HeadProblem) -> float:
    """Dinkelbach with each token's term maximized over all cube edges by golden section."""
    n, d, r = P.n, P.d, P.radius
    q = P.nominal_query()
    V = r * np.array(list(itertools.product([-1.0, 1.0], repeat=d)))
    S0, E = [], []
    for v in V:
        for i in np.nonzero(v < 0)[0]:
            S0.append(v), E.append(2 * r * np.eye(d)[i])
    S0, E = np.array(S0), np.array(E)

    def term(j, D, t):
        Z = P.Z0[j] + D
        s = (Z @ P.W_K + P.b_K) @ q / np.sqrt(P.d_head)
        return np.exp(s - 60.0) * ((Z @ P.W_V + P.b_V) @ P.c - t)

    def maximizers(t):
        out = []
        for j in range(n):
            a, b = np.zeros(len(S0)), np.ones(len(S0))
            for _ in range(80):  # each edge term has at most one stationary point
                c1, c2 = b - GOLD * (b - a), a + GOLD * (b - a)
                left = term(j, S0 + c1[:, None] * E, t) > term(j, S0 + c2[:, None] * E, t)
                a, b = np.where(left, a, c1), np.where(left, c2, b)
            pts = np.concatenate([S0, S0 + E, S0 + 0.5 * (a + b)[:, None] * E])
            out.append(pts[np.argmax(term(j, pts, t))])
        return np.stack(out)

    t = best = P.nominal_value()
    for _ in range(1000):
        v = P.value(P.Z0 + maximizers(t) * (1 - 1e-12))
        best = max(best, v)
        if not v > t:
            break
        t = v
    return best


def _sphere_multistart_max(P: HeadProblem, rng, restarts=5) -> float:
    n, d, r = P.n, P.d, P.radius
    q = P.nominal_query()
    u_s, u_w = P.W_K @ q / np.sqrt(P.d_head), P.W_V @ P.c

    def neg(x):
        X = x.reshape(n, d)
        nx = np.linalg.norm(X, axis=1, keepdims=True)
        U = X / nx
        Z = P.Z0 + r * U
        s = (Z @ P.W_K + P.b_K) @ q / np.sqrt(P.d_head)
        a = np.exp(s - s.max())
        a /= a.sum()
        w = (Z @ P.W_V + P.b_V) @ P.c
        g = a @ w
        G = a[:, None] * ((w - g)[:, None] * u_s + u_w)
        GX = r / nx * (G - (G * U).sum(1, keepdims=True) * U)
        return -g, -GX.ravel()

    best = -np.inf
    for _ in range(restarts):
        res = minimize(neg, rng.standard_normal(n * d), jac=True, method="L-BFGS-B",
                       options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 3000})
        X = res.x.reshape(n, d)
        Z = P.Z0 + r * X / np.linalg.norm(X, axis=1, keepdims=True) * (1 - 1e-12)
        assert P.in_ball(Z)
        best = max(best, P.value(Z))
    return best


@settings(max_examples=12, **SETTINGS)
@given(seed=st.integers(0, 2**31))
def test_exact_matches_cube_edge_search_linf(seed):
    P = make_problem(seed, "linf", d_lo=3, d_hi=6)
    ex = exact_worst_case(P)
    bf = _box_face_max(P)
    assert bf <= ex.hi
    assert abs(bf - ex.lo) <= 1e-6 * ex.value_spread


@settings(max_examples=12, **SETTINGS)
@given(seed=st.integers(0, 2**31))
def test_exact_matches_sphere_multistart_l2(seed):
    P = make_problem(seed, "l2", d_lo=3, d_hi=6)
    ex = exact_worst_case(P)
    bf = _sphere_multistart_max(P, np.random.default_rng(seed))
    assert bf <= ex.hi
    assert abs(bf - ex.lo) <= 1e-6 * ex.value_spread


# ------------------------------------------------------------------------------------------------
@settings(max_examples=40, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]))
def test_certificate_chain_and_witness(seed, norm):
    P = make_problem(seed, norm)
    rng = np.random.default_rng(seed + 1)
    ex, exm = exact_worst_case(P), exact_worst_case_min(P)
    sampled = values(P, sample_perturbations(P, rng))
    fo, fom = first_order_certificate(P), first_order_certificate(P, "min")
    assert ex.hi >= ex.lo >= sampled.max()
    assert exm.lo <= exm.hi <= sampled.min()
    # first order >= the optimum; when the relaxation is tight (e.g. n = 1) fo and hi are two upper
    # bounds on the same number that differ only by their rounding margins, so compare with lo
    assert fo >= ex.lo and fom <= exm.hi
    if fo - ex.lo > 1e-9 * ex.value_spread:
        assert fo >= ex.hi
    if exm.hi - fom > 1e-9 * exm.value_spread:
        assert fom <= exm.lo
    # witnesses: feasible, and they attain the reported ends
    assert P.in_ball(ex.witness) and P.in_ball(exm.witness)
    # the witness attains its value; the bracket's end is the certified lower end of that value (extended
    # precision less its error bound), within rounding of the float64 evaluation
    assert P.value(ex.witness) == ex.witness_value and abs(ex.witness_value - ex.lo) <= 1e-12 * (1 + ex.value_spread)
    assert P.value(exm.witness) == exm.witness_value and abs(exm.witness_value - exm.hi) <= 1e-12 * (
        1 + exm.value_spread
    )
    # certified width
    assert ex.relative_width < 1e-10 and exm.relative_width < 1e-10


def test_closed_forms():
    rng = np.random.default_rng(0)
    for norm in ("linf", "l2"):
        # one token: g = w, max = w0 + r ||u_w||_*
        P = random_head_problem(rng, d=5, d_head=3, n=1, radius=0.3, norm=norm)
        _, w0, _, u_w = fixed_query_reduction(P).directions()
        ex = exact_worst_case(P)
        assert ex.lo <= w0[0] + P.radius * P.dual_norm(u_w) <= ex.hi
        # query vector 0: uniform attention, max = mean(w0) + r ||u_w||_*
        P = random_head_problem(rng, d=5, d_head=3, n=4, radius=0.3, norm=norm)
        P = HeadProblem(P.W_Q, P.W_K, P.W_V, -P.Z0[P.query_index] @ P.W_Q, P.b_K, P.b_V, P.Z0, P.query_index,
                        P.c, P.radius, norm)
        _, w0, _, u_w = fixed_query_reduction(P).directions()
        ex = exact_worst_case(P)
        target = w0.mean() + P.radius * P.dual_norm(u_w)
        assert abs(ex.lo - target) <= 1e-12 * abs(target) and ex.lo <= ex.hi
        assert ex.hi - ex.lo < 1e-10 * ex.value_spread


def test_large_score_motion_converges():
    """Scores moving by ~60: plain Dinkelbach crawls here; the safeguarded root must still be exact."""
    P = random_head_problem(np.random.default_rng(2), d=5, d_head=3, n=3, radius=1.0, norm="linf", scale=2.0)
    s0, w0, u_s, u_w = fixed_query_reduction(P).directions()
    assert P.radius * np.abs(u_s).sum() > 30
    ex = exact_worst_case(P)
    assert ex.relative_width < 1e-10
    assert abs(_box_face_max(P) - ex.lo) <= 1e-9 * ex.value_spread


def test_exact_rejects_varying_query():
    P = random_head_problem(np.random.default_rng(0), mode="varying")
    try:
        exact_worst_case(P)
    except ValueError:
        return
    raise AssertionError("varying query must be rejected")


# ------------------------------------------------------------------------------------------------
@settings(max_examples=30, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]))
def test_projected_ball_upper_boundary(seed, norm):
    """Support function of P in upward directions: closed form vs the computed boundary."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 8))
    u_s, u_w = rng.standard_normal(d), rng.standard_normal(d)
    if rng.random() < 0.2:
        u_s[rng.integers(d)] = 0.0
    if rng.random() < 0.2:
        u_w = 2.0 * u_s  # collinear
    r = float(rng.uniform(0.1, 2.0))
    for _ in range(20):
        al, be = rng.standard_normal(), abs(rng.standard_normal())
        if norm == "linf":
            P = Zonotope2D(u_s, u_w, r)
            exact = r * np.abs(al * u_s + be * u_w).sum()
            got = (al * P.sigma + be * P.omega).max()
            # points on edge k are feasible and map onto the segment from vertex k to vertex k+1
            lam = rng.random(d)
            D = P.perturbations(np.arange(d), lam)
            assert np.all(np.abs(D) <= r)
            pts = np.stack([D @ u_s, D @ u_w], 1)
            seg = np.stack([P.sigma[:-1] + lam * P.dsigma, P.omega[:-1] + lam * P.domega], 1)
            assert np.allclose(pts, seg, atol=1e-12 * (1 + r * np.abs(u_s).sum() + r * np.abs(u_w).sum()))
        else:
            P = Ellipse2D(u_s, u_w, r)
            exact = r * np.linalg.norm(al * u_s + be * u_w)
            got = np.hypot(al * P.a + be * P.p, be * P.q)  # max over t of the boundary support
            th = rng.uniform(0, np.pi, 7)
            D = P.perturbations(th)
            assert np.all(np.linalg.norm(D, axis=1) <= r * (1 + 1e-12))
            assert np.allclose(D @ u_s, P.a * np.cos(th), atol=1e-12 * (1 + r * np.linalg.norm(u_s)))
            assert np.allclose(D @ u_w, P.p * np.cos(th) + P.q * np.sin(th),
                               atol=1e-12 * (1 + r * np.linalg.norm(u_w)))
        assert abs(got - exact) <= 1e-12 * (1 + exact)


def test_fixed_query_reduction_matches_float64():
    P = random_head_problem(np.random.default_rng(1), d=7, d_head=4, n=5)
    data = fixed_query_reduction(P)
    q = P.nominal_query()
    u_s = P.W_K @ q / np.sqrt(P.d_head)
    u_w = P.W_V @ P.c
    ref = (P.Z0 @ u_s + P.b_K @ q / np.sqrt(P.d_head), P.Z0 @ u_w + P.b_V @ P.c, u_s, u_w)
    for got, want, err in zip(data.directions(), ref, (data.err_s0, data.err_w0, data.err_us, data.err_uw)):
        assert np.all(np.abs(got - want) <= 1e-12 * (1 + np.abs(want)))
        assert np.all(err > 0) and np.all(err < 1e-13 * (1 + np.abs(want)))


# ------------------------------------------------------------------------------------------------
# extreme radii and score widths: finite, sound and tight at any R_s
def _extreme_problem(seed, norm, log_scale, log_r, n_hi=16, d_hi=6):
    rng = np.random.default_rng(seed)
    return random_head_problem(rng, d=int(rng.integers(1, d_hi + 1)), d_head=int(rng.integers(1, 5)),
                               n=int(rng.integers(1, n_hi + 1)), radius=10.0 ** log_r, norm=norm,
                               scale=10.0 ** log_scale)


def _trivial_top(P):
    """max_j (w0_j + R_w): no value of g exceeds it (plus a relative 1e-12 for rounding)."""
    _, w0, _, u_w = fixed_query_reduction(P).directions()
    top = float((w0 + P.radius * P.dual_norm(u_w)).max())
    return top + 1e-12 * (1.0 + abs(top))


@settings(max_examples=30, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]),
       log_scale=st.floats(-1.0, 1.0), log_r=st.floats(-4.0, float(np.log10(3.0))))
def test_exact_finite_sound_tight_at_any_radius(seed, norm, log_scale, log_r):
    """Weight scales 0.1-10, radii 1e-4..3 (R_s up to thousands): the bracket is finite, contains every
    sampled value, never exceeds the trivial bound max_j (w0_j + R_w), and is <= 1e-10 of the value
    spread unless `status` says why not."""
    _check_extreme(_extreme_problem(seed, norm, log_scale, log_r), seed)


@settings(max_examples=16, **SETTINGS)
@given(seed=st.integers(0, 2**31), norm=st.sampled_from(["linf", "l2"]),
       log_scale=st.floats(0.5, 1.0), log_r=st.floats(-0.5, float(np.log10(3.0))))
def test_exact_finite_sound_tight_when_scores_move_hundreds(seed, norm, log_scale, log_r):
    """The same at weight scales 3-10 and radii 0.3-3: R_s of tens to thousands, weights spanning far more
    than the double range (n <= 8 to keep the ellipse branch and bound fast)."""
    _check_extreme(_extreme_problem(seed, norm, log_scale, log_r, n_hi=8), seed)


def _check_extreme(P, seed):
    vals = values(P, sample_perturbations(P, np.random.default_rng(seed + 1), k=40))
    top, bottom = _trivial_top(P), -_trivial_top(P.negated())
    for sense in ("max", "min"):
        ex = exact_worst_case(P, sense)
        assert np.isfinite(ex.lo) and np.isfinite(ex.hi) and ex.lo <= ex.hi
        if sense == "max":
            assert ex.hi >= vals.max() and ex.hi <= top
        else:
            assert ex.lo <= vals.min() and ex.lo >= bottom
        status = getattr(ex, "status", "ok")
        assert ex.relative_width <= 1e-10 or status.split(":")[0] in ("precision", "trivial_cap", "iterations")
        assert status != "ok" or ex.relative_width <= 1e-10


def _grid_max_log_space(P, G, iters=200):
    """max g when every token takes a point of Z0_j + G: bisection on t of the sign of
    F(t) = sum_j max_k e^{s_jk} (w_jk - t), every term in log form (the token substitution solver works
    with one exp shift and loses tokens once scores span more than ~745)."""
    q = P.nominal_query()
    S = np.stack([(P.Z0[j] + G) @ P.W_K @ q / np.sqrt(P.d_head) + P.b_K @ q / np.sqrt(P.d_head) for j in range(P.n)])
    W = np.stack([((P.Z0[j] + G) @ P.W_V + P.b_V) @ P.c for j in range(P.n)])

    def F_positive(t):
        pos, neg = [], []
        for s, w in zip(S, W):
            if np.any(w > t):
                pos.append(np.max(np.where(w > t, s + np.log(np.maximum(w - t, 1e-300)), -np.inf)))
            elif np.any(w == t):
                continue
            else:
                neg.append(np.min(s + np.log(t - w)))
        lp = np.logaddexp.reduce(pos) if pos else -np.inf
        ln = np.logaddexp.reduce(neg) if neg else -np.inf
        return lp > ln

    lo, hi = P.nominal_value(), float(W.max())
    for _ in range(iters):
        m = 0.5 * (lo + hi)
        lo, hi = (m, hi) if F_positive(m) else (lo, m)
    return lo


def test_exact_tight_across_a_kink_of_F():
    """R_s ~ 260 (linf, d = 2): just above t = lo the dominant token's maximizer jumps to another vertex and
    its weight drops by e^-hundreds, so F(lo) > 0 is ~1e-15 while the root is far away. Plain Dinkelbach
    stops at lo (a Newton step gains < tol) and the old bracket was 0.06 of the spread wide, its hi above
    max_j (w0_j + R_w); bisection on the certified bracket must find the optimum (checked against a dense
    boundary grid)."""
    P = _extreme_problem(74, "linf", 0.8, 0.4)
    s0, w0, u_s, u_w = fixed_query_reduction(P).directions()
    assert P.d == 2 and P.radius * np.abs(u_s).sum() > 250
    ex = exact_worst_case(P)
    grid = _grid_max_log_space(P, _ball_grid("linf", P.radius, m=4000))
    assert ex.relative_width <= 1e-10 and ex.status == "ok"
    assert ex.lo <= ex.hi and grid <= ex.hi and grid >= ex.lo - 1e-6 * ex.value_spread


def test_exact_hi_finite_when_weights_underflow():
    """R_s ~ 345 (l2): the maximizer's weights are all below e^-690 of the largest score. The old F_up
    added an absolute 1e-290 and its hi reached 1.7e10 (max_j (w0_j + R_w) is 12.8); in log space the
    bracket stays <= 1e-10 of the spread."""
    P = _extreme_problem(54, "l2", 0.8, 0.4)
    s0, w0, u_s, u_w = fixed_query_reduction(P).directions()
    assert P.radius * np.linalg.norm(u_s) > 340
    vals = values(P, sample_perturbations(P, np.random.default_rng(0), k=60))
    for sense in ("max", "min"):
        ex = exact_worst_case(P, sense)
        assert ex.lo <= ex.hi and ex.relative_width <= 1e-10 and ex.status == "ok"
        assert (ex.hi >= vals.max()) if sense == "max" else (ex.lo <= vals.min())
        assert ex.hi <= _trivial_top(P) and ex.lo >= -_trivial_top(P.negated())


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_exact_witness_when_rounding_exceeds_the_ball(norm):
    """r = 1e-7 around tokens of size ~1000: Z0 + delta rounds by ~1e-13 = 1e-6 r, more than the old
    largest shrink (1e-9 r), and the old solver raised RuntimeError. The witness is shrunk further (or
    falls back to the nominal point); the bracket stays certified and tight."""
    b = random_head_problem(np.random.default_rng(0), d=4, d_head=3, n=5, radius=1e-7, norm=norm)
    P = HeadProblem(b.W_Q, b.W_K, b.W_V, b.b_Q, b.b_K, b.b_V, 1000.0 * b.Z0, b.query_index, b.c, 1e-7, norm)
    vals = values(P, sample_perturbations(P, np.random.default_rng(1), k=40))
    for sense in ("max", "min"):
        ex = exact_worst_case(P, sense)
        assert P.in_ball(ex.witness) and P.value(ex.witness) == ex.witness_value
        assert ex.lo <= ex.hi and ex.relative_width <= 1e-10
        assert (ex.hi >= vals.max()) if sense == "max" else (ex.lo <= vals.min())
