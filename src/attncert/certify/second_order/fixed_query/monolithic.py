"""Second-order certificate, fixed query: the relaxation of `rows` over the 2-D image of the ball.

Each token has 5 variables (tau shared; lam_j, U_j, V_j in R^2), whatever the model width d, plus one
deviation variable nu_j when the score half-width is tiny (`rows.DEVIATION_BELOW`).
* l2: P = {x : ||G x|| <= 1} (G from a regularized Cholesky factor of [u_s; u_w][u_s; u_w]^T, so the
  ellipse may only grow): two 3-dimensional second-order cones per token.
* linf: P is a zonotope; its upper facets are chosen by cutting planes (`facets`).
The cvxpy problem is built once per (n, norm, slots, variant, deviation form) with Parameters and reused
(DPP). Coordinates are in units: sigma / R_s and omega / R_w (each coordinate by its own range, so the facet
normals and every variable are O(tau)); the objective is (g - g0) / rho_o with rho_o = first-order bound - g0.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.second_order.dual_bound.solve_ladder import SOLVER_LADDER, solve_and_certify
from attncert.certify.second_order.dual_bound.dual_record import note_affine, note_construction
from attncert.certify.second_order.relaxation.cutting_planes import cutting_plane_solve, vertex_dinkelbach
from attncert.certify.second_order.relaxation.facets import NEAR_EDGES, SLOTS, UpperChainFacets, initial_edges
from attncert.certify.second_order.fixed_query.program import (FixedRelaxationData, build_fixed_program, fixed_box,
                                                         set_fixed_parameters)
from attncert.certify.second_order.relaxation.rows import (MONOTONE_POINTS, SecondOrderResult, fallback_bound,
                                                      representable, settle)
from attncert.head.problem import HeadProblem
from attncert.head.reduced_geometry import ReducedGeometry
from attncert.head.rounding import outward_affine

def relaxation_data(problem: HeadProblem, geo: ReducedGeometry, fo: float | None = None,
                    origin: bool = True) -> FixedRelaxationData:
    """The reduction (geo: `reduced_geometry(problem)`) in the relaxation's units; origin=False keeps the nominal
    value as objective origin."""
    s0, w0, u_s, u_w, eps_s, eps_w, R_s, R_w = geo.s0, geo.w0, geo.u_s, geo.u_w, geo.eps_s, geo.eps_w, geo.R_s, geo.R_w
    g_nom = geo.nominal
    fo = first_order_certificate(problem, geometry=geo) if fo is None else fo
    rho_w = R_w if R_w > 0 else 1.0
    rho_o = max(fo - g_nom, R_w, 1e-300) if math.isfinite(fo) else max(R_w, 1.0)
    g0 = _origin(problem, geo, g_nom, fo) if origin else g_nom
    shift = float(np.max(s0 + eps_s))
    return FixedRelaxationData(s0 - shift, w0, g0, eps_s, eps_w, u_s, u_w, R_s, R_w, rho_w, rho_o, problem.radius,
                               problem.norm, geo.kept_tokens())


ORIGIN_POINTS = 65  # points of the ellipse arc (l2) for the origin's Dinkelbach estimate


def _origin(problem: HeadProblem, geo: ReducedGeometry, g_nom: float, fo: float) -> float:
    """Objective origin: an estimate of the worst case found without the exact solver, else the nominal value.

    Dinkelbach's iteration over points of the upper boundary of P only (linf: the zonotope's vertices;
    l2: ORIGIN_POINTS points of the ellipse arc), a heuristic that costs microseconds. Any origin gives the
    same relaxation and the same certified bound up to rounding; one near the optimum makes the
    objective's terms a_j (w0_j - origin) small where the weights matter, so the residual of the
    normalization row (which the dual pays times the optimum in objective units) costs ~gap instead of
    ~(t* - g_nom). The certificate never uses the exact worst case (it must work where none exists).
    """
    s0, w0 = geo.s0, geo.w0
    image = geo.image
    if problem.norm == "linf":
        sig, om = image.sigma, image.omega
    else:
        t = np.linspace(0.0, math.pi, ORIGIN_POINTS)
        sig, om = image.a * np.cos(t), image.p * np.cos(t) + image.q * np.sin(t)
    n = problem.n
    with np.errstate(all="ignore"):
        est, _ = vertex_dinkelbach(s0 - float(s0.max()), w0, g_nom, np.tile(sig, (n, 1)), np.tile(om, (n, 1)))
    return est if math.isfinite(est) and g_nom <= est <= fo else g_nom


def _to_g(bound: float, D: FixedRelaxationData) -> float:
    """g0 + rho_o * bound (+ the dropped tokens' tail), rounded outward."""
    note_affine(D.g0, D.rho_o, D.tail)
    return outward_affine(D.g0, D.rho_o, bound, D.tail)


def _solve_linf(geo: ReducedGeometry, D: FixedRelaxationData, upper_cone: bool, mono: int, ladder):
    n = D.A.size
    chain = UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s, chain=geo.image)
    chains = [chain] * n
    _, k = vertex_dinkelbach(D.A, D.w0, D.g0, np.tile(chain.chain.sigma, (n, 1)), np.tile(chain.chain.omega, (n, 1)))
    edges = initial_edges(chains, k, SLOTS, near=NEAR_EDGES)
    prob, P, V = build_fixed_program(n, "linf", SLOTS, upper_cone, mono, D.deviation)
    note_construction(reset=True, path="fixed", key=(n, "linf", SLOTS, upper_cone, mono, D.deviation), data=D)
    El, Ehat, tau_lo, tau_hi = set_fixed_parameters(P, D)
    box = fixed_box(V, n, tau_lo, tau_hi, D)
    return cutting_plane_solve(prob, P, V, box, chains, edges, SLOTS, D.scales, lambda b: _to_g(b, D), ladder)


def prepared_data(problem: HeadProblem, geo: ReducedGeometry, t0: float):
    """(fo, D, early) for a fixed-query relaxation: the fallback bound, the relaxation data with the objective
    origin set and the negligible tokens dropped, and the result to return at once when there is nothing to
    solve (scores that do not move, or a weight band beyond the program: a labelled fallback), else None.
    geo: `reduced_geometry(problem)`."""
    if problem.mode != "fixed":
        raise ValueError("the fixed-query relaxation expects mode='fixed'")
    fo = fallback_bound(problem, geo)
    D = relaxation_data(problem, geo, fo, origin=False)
    if not D.R_s > 1e-9 * max(1.0, D.R_w):  # scores (almost) do not move: nothing second order to gain
        return fo, D, SecondOrderResult(fo, "static_scores", "first_order_static", time.perf_counter() - t0, False)
    why = representable(D.A, np.full(D.A.size, D.R_s), D.eps_s, width_only=True)
    if not why:
        D = replace(D, g0=_origin(problem, geo, D.g0, fo)).drop_negligible()
        why = representable(D.A, np.full(D.A.size, D.R_s), D.eps_s)
    return fo, D, (settle(math.inf, fo, t0, "fixed", no_solve_reason=why) if why else None)


def second_order_fixed(problem: HeadProblem, geo: ReducedGeometry, upper_cone: bool = False,
                       monotone_points: int = MONOTONE_POINTS, ladder=SOLVER_LADDER) -> SecondOrderResult:
    """Sound upper bound on max g for a fixed query (mode "fixed"); see the module docstring.
    geo: `reduced_geometry(problem)`."""
    t0 = time.perf_counter()
    fo, D, early = prepared_data(problem, geo, t0)
    if early is not None:
        return early
    n = D.A.size

    log, best, best_status, best_solver, primal, gap = [], math.inf, "not_run", "none", math.nan, math.nan
    rounds, n_facets = 0, 0
    if problem.norm == "l2":
        prob, P, V = build_fixed_program(n, "l2", 0, upper_cone, monotone_points, D.deviation)
        note_construction(reset=True, path="fixed", key=(n, "l2", 0, upper_cone, monotone_points, D.deviation),
                          data=D)
        El, Ehat, tau_lo, tau_hi = set_fixed_parameters(P, D)
        cert = solve_and_certify(prob, fixed_box(V, n, tau_lo, tau_hi, D), ladder=ladder)
        rounds = 1
        log += [(s, st, _to_g(b, D), sec) for (s, st, b, sec) in cert.log]
        if cert.converged:
            best, best_status, best_solver = _to_g(cert.bound, D), cert.status, cert.solver
            primal = _to_g(cert.primal, D)
            gap = best - primal
    else:
        best, best_status, best_solver, primal, rounds, n_facets, log, gap = _solve_linf(
            geo, D, upper_cone, monotone_points, ladder)
    return settle(best, fo, t0, "fixed", status=best_status, solver=best_solver, primal=primal, rounds=rounds,
                  n_facets=n_facets, log=log, dual_gap=gap)
