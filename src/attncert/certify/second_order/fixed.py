"""Second-order certificate, fixed query: the relaxation of `relaxation` over the 2-D image of the ball.

Each token has 5 variables (tau shared; lam_j, U_j, V_j in R^2), whatever the model width d.
* l2: P = {x : ||G x|| <= 1} (G from a regularized Cholesky factor of [u_s; u_w][u_s; u_w]^T, so the
  ellipse may only grow): two 3-dimensional second-order cones per token.
* linf: P is a zonotope; its upper facets are chosen by cutting planes (`facets`).
The cvxpy problem is built once per (n, norm, slots, variant) with Parameters and reused (DPP).
Coordinates are scaled by rho = R_s + R_w (x' = x / rho) so that the objective is O(1).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import cvxpy as cp
import numpy as np

from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.second_order.dual_certificate import SOLVER_LADDER, solve_and_certify
from attncert.certify.second_order.facets import (SLOTS, UpperChainFacets, cutting_plane_solve, initial_edges,
                                                  vertex_dinkelbach)
from attncert.certify.second_order.relaxation import (MONOTONE_POINTS, SecondOrderResult, data_errors, ellipse_matrix,
                                                      objective, polygon_constraints, settle, weight_constraints,
                                                      weight_parameters)
from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.problem import HeadProblem
from attncert.head.rounding import gamma, outward_affine

_CACHE: dict = {}


@dataclass
class FixedRelaxationData:
    """The fixed-query reduction in the relaxation's units (scores shifted, coordinates scaled by rho)."""

    A: np.ndarray  # shifted nominal scores s0 - shift
    w0: np.ndarray
    g0: float  # nominal value (objective origin)
    eps_s: np.ndarray
    eps_w: np.ndarray
    u_s: np.ndarray
    u_w: np.ndarray
    R_s: float  # >= max |sigma| over P (rounded up)
    R_w: float
    rho: float
    radius: float
    norm: str


def relaxation_data(problem: HeadProblem) -> FixedRelaxationData:
    s0, w0, u_s, u_w = fixed_query_reduction(problem).directions()
    eps_s, eps_w = data_errors(problem)
    up = 1.0 + gamma(problem.d + 4)
    R_s = problem.radius * problem.dual_norm(u_s) * up
    R_w = problem.radius * problem.dual_norm(u_w) * up
    shift = float(np.max(s0 + eps_s))
    return FixedRelaxationData(s0 - shift, w0, problem.nominal_value(), eps_s, eps_w, u_s, u_w, R_s, R_w,
                          R_s + R_w, problem.radius, problem.norm)


def _build(n: int, norm: str, K: int, upper_cone: bool, mono: int):
    key = ("fixed", n, norm, K, upper_cone, mono)
    if key in _CACHE:
        return _CACHE[key]
    tau = cp.Variable(name="tau")
    lam = cp.Variable(n, name="lam")
    U = cp.Variable((n, 2), name="U")
    V = cp.Variable((n, 2), name="V")
    P: dict = {}
    tau_n = tau * np.ones(n)
    cons = weight_constraints(P, n, tau, lam, U[:, 0], V[:, 0], upper_cone, mono)
    if norm == "l2":
        P["G"] = cp.Parameter((2, 2), name="G")
        P["cs"] = cp.Parameter(nonneg=True, name="cs")
        cons += [cp.SOC(P["cs"] * lam, P["G"] @ U.T, axis=0),
                 cp.SOC(P["cs"] * (tau_n - lam), P["G"] @ V.T, axis=0)]
    else:
        cons += polygon_constraints(P, n, K, U, V, lam, tau_n)
    entry = (cp.Problem(objective(P, tau, lam, U[:, 1], V[:, 1]), cons), P, dict(tau=tau, lam=lam, U=U, V=V))
    _CACHE[key] = entry
    return entry


def _box(V: dict, n: int, tau_lo: float, tau_hi: float, D: FixedRelaxationData) -> dict:
    inflate = 1.0 + 1e-9
    sb = tau_hi * D.R_s / D.rho * inflate
    wb = tau_hi * D.R_w / D.rho * inflate
    uv = (np.tile([-sb, -wb], (n, 1)), np.tile([sb, wb], (n, 1)))
    return {V["tau"]: (tau_lo, tau_hi), V["lam"]: (np.zeros(n), np.full(n, tau_hi)), V["U"]: uv, V["V"]: uv}


def _to_g(bound: float, D: FixedRelaxationData) -> float:
    """g0 + rho * bound, rounded outward (plus a tiny term for exp underflow of far-away tokens)."""
    return outward_affine(D.g0, D.rho, bound, 1e-290 * D.A.size * (1.0 + float(np.abs(D.w0).max())))


def _set_parameters(P: dict, D: FixedRelaxationData):
    n = D.A.size
    return weight_parameters(P, D.A, np.full(n, D.R_s), D.eps_s, D.w0, D.eps_w, D.g0, D.rho)


def _solve_linf(problem: HeadProblem, D: FixedRelaxationData, upper_cone: bool, mono: int, ladder):
    n = problem.n
    chain = UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s)
    chains = [chain] * n
    _, k = vertex_dinkelbach(D.A, D.w0, D.g0, np.tile(chain.chain.sigma, (n, 1)), np.tile(chain.chain.omega, (n, 1)))
    edges = initial_edges(chains, k)
    prob, P, V = _build(n, "linf", SLOTS, upper_cone, mono)
    El, Ehat, tau_lo, tau_hi = _set_parameters(P, D)
    box = _box(V, n, tau_lo, tau_hi, D)
    return cutting_plane_solve(prob, P, V, box, chains, edges, SLOTS, D.rho, El, Ehat, lambda b: _to_g(b, D), ladder)


def second_order_fixed(problem: HeadProblem, upper_cone: bool = False, monotone_points: int = MONOTONE_POINTS,
                       ladder=SOLVER_LADDER) -> SecondOrderResult:
    """Sound upper bound on max g for a fixed query (mode "fixed"); see the module docstring."""
    if problem.mode != "fixed":
        raise ValueError("second_order_fixed expects mode='fixed'")
    t0 = time.perf_counter()
    D = relaxation_data(problem)
    n = problem.n
    if not D.R_s > 1e-9 * max(1.0, D.R_w):  # scores (almost) do not move: nothing second order to gain
        v = first_order_certificate(problem)
        return SecondOrderResult(v, "static_scores", "first_order_static", time.perf_counter() - t0, False)

    log, best, best_status, best_solver, primal = [], math.inf, "not_run", "none", math.nan
    rounds, n_facets = 0, 0
    if problem.norm == "l2":
        prob, P, V = _build(n, "l2", 0, upper_cone, monotone_points)
        El, Ehat, tau_lo, tau_hi = _set_parameters(P, D)
        P["G"].value, P["cs"].value = ellipse_matrix(D.u_s, D.u_w, D.radius, D.rho)
        cert = solve_and_certify(prob, _box(V, n, tau_lo, tau_hi, D), ladder=ladder)
        rounds = 1
        log += [(s, st, _to_g(b, D), sec) for (s, st, b, sec) in cert.log]
        if cert.converged:
            best, best_status, best_solver, primal = _to_g(cert.bound, D), cert.status, cert.solver, _to_g(cert.primal, D)
    else:
        best, best_status, best_solver, primal, rounds, n_facets, log = _solve_linf(problem, D, upper_cone,
                                                                                    monotone_points, ladder)
    fo = first_order_certificate(problem)
    return settle(best, best_status, best_solver, fo, t0, "fixed", primal, rounds, n_facets, log, "not_run")
