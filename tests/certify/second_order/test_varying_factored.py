"""Varying query, factored weights (`second_order.varying_query.factored`): soundness and the derivation, checked.

References: multi-start ascent and random box vertices / sphere points (feasible values, lower bounds of
max g); the lifted true points (every constraint of the program must hold there, inside the box).
"""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attncert.certify.second_order.relaxation.facets as fc
import attncert.certify.second_order.relaxation.rows as rl
import attncert.certify.second_order.varying_query.factored as vf
import attncert.certify.second_order.varying_query.program as vfp
from attncert.certify.best_feasible_ascent import best_feasible_ascent
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.second_order.relaxation.key_support_cut import start_support
from attncert.certify.second_order.varying_query.data import VaryingData
from attncert.head.problem import random_head_problem
from attncert.head.reduced_geometry import reduced_geometry

from head_strategies import sampled_max, small_heads  # tests/head_strategies.py
from lifted_varying_point import lifted_factored_point  # tests/lifted_varying_point.py

SETTINGS = dict(suppress_health_check=[HealthCheck.too_slow], derandomize=True)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


@settings(max_examples=16, **SETTINGS)
@given(small_heads(mode="varying"), st.booleans(), st.booleans())
def test_factored_sound_against_ascent(problem, upper_cone, negate):
    """Certificate >= every feasible value found (ascent, random vertices), <= first order; both senses."""
    p = problem.negated() if negate else problem
    res = vf.second_order_varying_factored(p, reduced_geometry(p), upper_cone=upper_cone)
    assert math.isfinite(res.value)
    best = best_feasible_ascent(p, restarts=8, steps=80).value
    assert res.value >= best
    assert res.value >= sampled_max(p, k=32)
    fo = first_order_certificate(p)
    assert res.value <= fo + 1e-12 * (1.0 + abs(fo))
    if res.fallback:
        assert res.solver == "first_order" and res.status.startswith("fallback")


@pytest.mark.parametrize("H", [1e-3, 0.05, 0.4, 1.0, 3.0, 9.0])
def test_quadratic_rows_lie_above_the_exponential(H):
    """1 + kb (qa + qb t + qc t^2) >= e^{H (t + 1)} on [-1, 1] for every tangent point (pointwise, so in moments)."""
    qa, qb, qc = vfp.quadratic_rows(np.array([H]))
    kb = np.expm1(2 * H)
    t = np.linspace(-1.0, 1.0, 40001)
    f = np.exp(H * (t + 1.0))
    for c in range(qa.shape[1]):
        q = 1.0 + kb * (qa[0, c] + qb[0, c] * t + qc[0, c] * t * t)
        assert np.all(q >= f * (1.0 - 1e-15))


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_query_budget_covers_every_query_perturbation(norm):
    rng = np.random.default_rng(3)
    m, d = 6, 40
    Vt = rng.standard_normal((m, d)) * rng.uniform(0.2, 3.0, (m, 1))
    Vt /= (np.abs(Vt).sum(1, keepdims=True) if norm == "linf" else np.linalg.norm(Vt, axis=1, keepdims=True))
    S = vfp.budget_subsets(m)
    L = vfp.query_budget(Vt, norm, S)
    for _ in range(300):
        if norm == "linf":  # box vertices, and local maximizers of the convex quadratic (sign iterations)
            x = np.sign(rng.standard_normal(d))
            row = S[rng.integers(S.shape[0])] > 0
            for _ in range(rng.integers(0, 5)):
                x = np.sign(Vt[row].T @ (Vt[row] @ x) + 1e-300)
        else:
            x = rng.standard_normal(d)
            x /= np.linalg.norm(x)
        e2 = (Vt @ x) ** 2
        assert np.all(S @ e2 <= L * (1 + 1e-12))
    assert np.all(L <= S.sum(1))


def _lift_factored(p, D, delta):
    """Values of every variable of the factored program at the lifted true point of `delta`."""
    return lifted_factored_point(p, D, delta, lambda j, di: D.p[j] @ di)


@pytest.mark.parametrize("norm", ["linf", "l2"])
@pytest.mark.parametrize("upper_cone", [False, True])
@pytest.mark.parametrize("center", [False, True])
def test_lifted_true_points_are_feasible_factored(norm, upper_cone, center):
    rng = np.random.default_rng(11)
    p = random_head_problem(rng, d=6, d_head=4, n=5, radius=0.08, norm=norm, mode="varying")
    D = VaryingData(p, reduced_geometry(p), first_order_certificate(p), center)
    support = vfp.SUPPORT_SLOTS if norm == "linf" else 0
    prob, P, V = vfp.build_factored_program(p.n, D.d, norm, fc.SLOTS, rl.MONOTONE_POINTS, True, upper_cone, support)
    tau_lo, tau_hi, Hf = vfp.set_factored_parameters(P, D)
    if norm == "linf":
        chains = [fc.UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s)] * (p.n - 1)
        chains.append(fc.UpperChainFacets(D.u_q, D.u_w, D.radius, D.R_q))
        fc.fill_facets(P, chains, [np.arange(c.d) for c in chains], fc.SLOTS, D.scales[:, :2])
        # the keys' support cuts at the first solve's multipliers and at random ones (any multiplier is valid)
        fo_obj = (first_order_certificate(p) - D.g0 - D.tail) / D.rho_o
        vfp.fill_support(P, D, start_support(fo_obj)[:4] + list(rng.uniform(-3.0, 3.0, 4) * fo_obj))
    box = vfp.factored_box(V, D, tau_lo, tau_hi, Hf)
    for k in range(100):
        delta = p.radius * (np.sign(rng.standard_normal(p.Z0.shape)) if norm == "linf" else
                            rng.standard_normal(p.Z0.shape))
        if norm == "linf":
            delta = np.where(rng.uniform(size=delta.shape) < 0.6, delta, delta * rng.uniform(-1, 1, delta.shape))
        else:
            delta = p.radius * delta / np.linalg.norm(delta, axis=1, keepdims=True) * rng.uniform(0.5, 1.0, (p.n, 1))
        if k % 2:  # every key at one vertex of P's boundary, the query nearly still: where the support cuts are tight
            theta = rng.uniform(0.0, 2.0 * np.pi)
            g = np.cos(theta) * D.u_s + np.sin(theta) * D.u_w
            delta[:] = p.radius * (np.sign(g) if norm == "linf" else g / np.linalg.norm(g))
            delta[p.query_index] *= 1e-3
        for name, val in _lift_factored(p, D, delta).items():
            V[name].value = val
            lo, hi = box[V[name]]
            assert np.all(lo <= val) and np.all(val <= hi), name
        for c in prob.constraints:
            if hasattr(c, "args") and type(c).__name__ == "ExpCone":
                xx, yy, zz = (np.asarray(a.value, dtype=float) for a in c.args)
                viol = float(np.max(yy * np.exp(xx / yy) - zz - 1e-12 * np.abs(zz)))
            else:
                viol = float(np.max(c.violation()))
            assert viol <= 1e-12, (type(c).__name__, c.shape)
        assert D.g0 + D.rho_o * prob.objective.value >= p.value(p.Z0 + delta) - 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_support_cuts_hold_and_are_tight_at_the_vertices_of_P(seed):
    """The keys' support cuts as the program holds them (`fill_support`: scaled rows on btilde, lam, V_omega,
    U_omega): no lifted true point violates them, and with every key at a vertex of P's boundary (small radius: the
    bilinear coordinate's range, which no true point fills, is ~1e-3 of the score's) each key's row comes within
    1 % of zero at every multiplier, so a lowered or a misplaced coefficient shows."""
    rng = np.random.default_rng(seed)
    p = random_head_problem(rng, d=6, d_head=4, n=5, radius=0.005, norm="linf", mode="varying")
    D = VaryingData(p, reduced_geometry(p), first_order_certificate(p), True)
    prob, P, V = vfp.build_factored_program(p.n, D.d, "linf", fc.SLOTS, 0, True, False, vfp.SUPPORT_SLOTS)
    fo_obj = (first_order_certificate(p) - D.g0 - D.tail) / D.rho_o
    ts = start_support(fo_obj)[::2] + list(rng.uniform(-3.0, 3.0, 5) * fo_obj)
    vfp.fill_support(P, D, ts)
    m = D.n - 1
    rows = [np.asarray(P[k].value)[:len(ts)] for k in ("sup_base", "sup_lam", "sup_V", "sup_U")]
    Hf, hk = vfp.widths(D)
    kappa = rl.weight_coefficients(D.A - Hf, hk, D.eps, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, 0)["kappa"][:m]
    closest = np.full((len(ts), m), np.inf)
    for theta in np.linspace(0.0, 2.0 * np.pi, 721):
        g = np.cos(theta) * D.u_s + np.sin(theta) * D.u_w
        delta = p.radius * np.sign(g) * np.ones((p.n, 1))
        delta[p.query_index] = p.radius * np.sign(rng.standard_normal(p.d)) * 1e-3
        v = _lift_factored(p, D, delta)
        s = (rows[0] * v["bt"] - rows[1] * v["lam"][:m] - rows[2] * v["V"][:m, 1] - rows[3] * v["U"][:m, 1])
        # the key's Lagrangian term |alpha| (btilde + kappa lam) + gamma |V_omega + Ehat U_omega| in the rows' units
        scale = np.abs(rows[1] / kappa) * (v["bt"] + kappa * v["lam"][:m]) + np.abs(rows[2] * v["V"][:m, 1]
                                                                                    + rows[3] * v["U"][:m, 1])
        assert np.all(s >= -1e-12 * scale), (theta, s.min())
        closest = np.minimum(closest, s / scale)
    assert np.all(closest <= 1e-2), closest.max()


def test_centering_keeps_the_head_and_narrows_the_query_shift():
    """Subtracting a common query direction changes no value (softmax is shift invariant) and narrows H."""
    p = random_head_problem(np.random.default_rng(5), d=8, d_head=4, n=6, radius=0.05, norm="linf", mode="varying")
    p.b_K[:] += 3.0  # a large common key component
    plain, centred = (
        VaryingData(p, reduced_geometry(p), math.inf),
        VaryingData(p, reduced_geometry(p), math.inf, center=True),
    )
    assert np.max(centred.H) < np.max(plain.H)
    res = vf.second_order_varying_factored(p, reduced_geometry(p))
    assert res.value >= max(best_feasible_ascent(p, restarts=8, steps=80).value, sampled_max(p, k=32))


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_factored_is_second_order(norm):
    """Relative gap to the best feasible value shrinks with r (the gap ~ r^2) and beats the first order."""
    rel = []
    for r in (0.01, 0.02, 0.04):
        p = random_head_problem(np.random.default_rng(0), d=6, d_head=4, n=5, radius=r, norm=norm, mode="varying")
        best = best_feasible_ascent(p, restarts=8, steps=80).value
        rel.append((vf.second_order_varying_factored(p, reduced_geometry(p)).value - best) / (best - p.nominal_value()))
        assert rel[-1] < 0.5 * (first_order_certificate(p) - best) / (best - p.nominal_value())
    assert rel[0] < rel[1] < rel[2]


def test_budget_rows_depend_on_the_number_of_keys_only():
    """Beyond PAIRS_UP_TO keys only the pairs of the heaviest TOP_KEYS get a row: same shape for any order."""
    m = vfp.PAIRS_UP_TO + 6
    order = np.random.default_rng(0).permutation(m)
    S, S0 = vfp.budget_subsets(m, order), vfp.budget_subsets(m)
    assert S.shape == S0.shape
    assert np.all(S[-1] == 1) and set(np.flatnonzero(S[:-1].sum(0))) == set(order[:vfp.TOP_KEYS])
    assert vfp.budget_subsets(7).shape[0] == 21 + 35 + 1


def test_factored_ladder_has_no_scs_and_failure_goes_to_the_unfactored_program(monkeypatch):
    """The factored program runs Clarabel only (SCS took seconds where every Clarabel rung stalled); when every
    factored attempt fails, the unfactored program (its ladder with SCS) gives the bound, labelled, and sound."""
    for ladder in (vf.FACTORED_LADDER, vf.FACTORED_LINF_LADDER):
        assert ladder and all(s == "CLARABEL" for s, _ in ladder)
    p = random_head_problem(np.random.default_rng(3), d=8, d_head=4, n=5, radius=0.02, norm="linf", mode="varying")
    ok = vf.second_order_varying_factored(p, reduced_geometry(p))
    assert "unfactored" not in ok.status and not ok.fallback
    monkeypatch.setattr(vf, "FACTORED_LINF_LADDER", (("NO_SUCH_SOLVER", {}),))
    res = vf.second_order_varying_factored(p, reduced_geometry(p))
    assert "unfactored: factored" in res.status and not res.fallback
    assert res.value >= max(best_feasible_ascent(p, restarts=8, steps=80).value, sampled_max(p, k=32))
