"""Second-order certificate, varying query: the moment relaxation with a lifted shared query perturbation.

Setting (`HeadProblem`, mode "varying"), row vectors, i = query token, k0_j = z_j W_K + b_K:

    s_j = s0_j + u_s.delta_j + p_j.delta_i + delta_i M delta_j^T / sqrt(d_h),     w_j = w0_j + u_w.delta_j,
    u_s = W_K q0 / sqrt(d_h),   p_j = W_Q k0_j / sqrt(d_h),   M = W_Q W_K^T,

and for the query token itself s_i = s0_i + (u_s + p_i).delta_i + delta_i M delta_i^T / sqrt(d_h). The
query perturbation delta_i is shared by all scores, so the problem no longer splits per token.

Coordinates. Token j != i carries x_j = (sigma_j, omega_j, eta_j, beta_j): the key/value pair
(u_s.delta_j, u_w.delta_j) in P (the fixed-query 2-D image of the ball), the query-induced shift
eta_j = p_j.delta_i in [-H_j, H_j] (H_j = r ||p_j||_*) and the bilinear term beta_j = delta_i M delta_j^T /
sqrt(d_h) in [-bb, bb] with bb = r^2 beta(M) / sqrt(d_h), beta(M) >= max over unit balls of x M y^T
(l2: the spectral norm; linf: min(sum_kl |M_kl|, d ||M||_2)). The query token carries
(sigma_i^+, omega_i) = ((u_s + p_i).delta_i, u_w.delta_i) in P_i (its own 2-D image), eta_i = 0 and beta_i
in [-bb, bb]. Its total score shift is s_j - s0_j = sigma_j + eta_j + beta_j in [l_j, -l_j].

The smallest exact lifting of the shared query. All query-side quantities that enter are n + 1 linear
functionals y = V^T delta_i, V = [p_j (j != i), u_s + p_i, u_w]. Their joint range Y = V^T B_r is
represented exactly with one witness: tau y = V^T (tau delta_i), with the witness W = tau delta_i / r in
tau B_1 (linf: |W| <= tau, d linear pairs; l2: ||W|| <= tau, one second-order cone). Only the tau-scaled
first moment of delta_i is lifted; the a-scaled moments of the query coordinates are per token
(localized by the same weight-bound products as the key coordinates, intervals for eta and beta).
The bilinear term is kept as a coordinate bounded by the product of the two balls (its McCormick
envelope at the centre), which costs O(r^2): the certificate stays second order; a full cross-moment
lifting would need n d_h^2 variables.

Relaxation. Exactly the fixed-query program of `monolithic` (built from `rows`) with per-token intervals
[l_j, -l_j], extended coordinates and the coupling of the query coordinates:

    maximize    sum_j E_lj ( ahat_j wt_j + V_j,omega + Ehat_j U_j,omega )
    subject to  sum_j E_lj ahat_j = 1,   ahat_j = tau + kappa_j lam_j,   0 <= lam_j <= tau,
                (Stot_j - l_j tau, tau, ahat_j) in K_exp,      Stot = (U_j + V_j)_(sigma + eta + beta),
                kappa_j lam_j <= (e^{2 eps_j} - 1) tau + e^{2 eps_j} c_j (Stot_j - l_j tau),
                E_tau[(e - E_c)(s - c)] >= -margin at interior score points c     (monotonicity cuts),
                [tight variant] (-(2 eps_j - l_j) ahat_j - Mtot_j, ahat_j, tau) in K_exp,  Mtot = (V + Ehat U)_(sigma +
                eta + beta),
                (U_j,sigma, U_j,omega) in lam_j P_j,  (V_j,sigma, V_j,omega) in (tau - lam_j) P_j,
                |U_j,eta| <= lam_j H_j, |V_j,eta| <= (tau - lam_j) H_j, the same for beta with bb,
                (U_j + V_j)_eta = (r V^T W)_j (j != i),  (U_i + V_i)_(sigma, omega) = (r V^T W)_(i, i+1),
                W in tau B_1.

Every lifted true perturbation is feasible, so the optimum bounds max g; the returned number is
g0 + the weak-duality bound of `weak_duality` (never the solver's primal), with facets of P and P_i
chosen by the same cutting planes as the fixed query. Every coordinate is in units of its own range
(sigma by R_s or R_q, omega by R_w, eta_j by H_j, beta by bb; a coordinate whose range is 0 is fixed at 0),
with the unit score (R sigma_hat + H eta_hat + bb beta_hat) / h_j carried by two auxiliary variables SU, SV
(the unit score of U and V) so that every row keeps one parameter per variable.
"""
from __future__ import annotations

import math
import time

import numpy as np

from attncert.certify.second_order.dual_bound.solve_ladder import SOLVER_LADDER, solve_and_certify
from attncert.certify.second_order.dual_bound.dual_record import note_affine, note_construction
from attncert.certify.second_order.relaxation.cutting_planes import cutting_plane_solve, vertex_dinkelbach
from attncert.certify.second_order.relaxation.facets import SLOTS, initial_edges
from attncert.certify.second_order.varying_query.data import VaryingData, start_chains
from attncert.certify.second_order.relaxation.rows import (
    MONOTONE_POINTS,
    SecondOrderResult,
    fallback_bound,
    representable,
    settle,
)
from attncert.certify.second_order.varying_query.unfactored_program import (
    build_varying_program,
    set_varying_parameters,
    varying_box,
)
from attncert.head.problem import HeadProblem
from attncert.head.reduced_geometry import ReducedGeometry
from attncert.head.rounding import outward_affine


def linf_start_facets(D: VaryingData) -> tuple[list, list]:
    """linf: each token's upper facet chain (keys from u_s, the query position from u_q) and the starting
    edges around the vertex that the boundary Dinkelbach estimate picks (`facets.initial_edges`)."""
    chains = start_chains(D)
    sig = np.stack([c.chain.sigma for c in chains])
    om = np.stack([c.chain.omega for c in chains])
    _, k = vertex_dinkelbach(D.A, D.w0, D.g0, sig, om)
    return chains, initial_edges(chains, k)


def prepared_varying(problem: HeadProblem, geo: ReducedGeometry, center: bool | str, path: str):
    """(fo, D, why) for every varying-query program: the fallback bound, the unit's data with the negligible tokens
    dropped (the certificate's record is noted before the drop, under `path`), and the reason there is nothing to
    solve ("" when there is something)."""
    fo = fallback_bound(problem, geo)
    D = VaryingData(problem, geo, fo, center)
    note_construction(reset=True, path=path, fields=D.fields())  # before drop_negligible changes D
    why = "degenerate score intervals" if not np.all(D.h > 1e-9) else representable(D.A, D.h, D.eps, width_only=True)
    if not why:
        D = D.drop_negligible()
        why = representable(D.A, D.h, D.eps)
    return fo, D, why


def _to_g(bound: float, D: VaryingData) -> float:
    """g0 + rho_o * bound (+ the dropped tokens' tail), rounded outward."""
    note_affine(D.g0, D.rho_o, D.tail)
    return outward_affine(D.g0, D.rho_o, bound, D.tail)


def second_order_varying(problem: HeadProblem, geo: ReducedGeometry, upper_cone: bool = False,
                         monotone_points: int = MONOTONE_POINTS, ladder=SOLVER_LADDER,
                         center: bool = False) -> SecondOrderResult:
    """Sound upper bound on max g for a varying query (see module docstring; center: `VaryingData`)."""
    if problem.mode != "varying":
        raise ValueError("second_order_varying expects mode='varying'")
    t0 = time.perf_counter()
    fo, D, why = prepared_varying(problem, geo, center, "varying_unfactored")
    best, status, solver, primal, rounds, n_facets, log, gap = math.inf, "not_run", "none", math.nan, 0, 0, [], math.nan
    n = D.n
    if not why:
        if problem.norm == "l2":
            prob, P, V = build_varying_program(n, D.d, "l2", 0, upper_cone, monotone_points, D.deviation)
            note_construction(key=(n, D.d, "l2", 0, upper_cone, monotone_points, D.deviation))
            El, Ehat, (tau_lo, tau_hi) = set_varying_parameters(P, D)
            cert = solve_and_certify(prob, varying_box(V, D, tau_hi, tau_lo), ladder=ladder)
            rounds = 1
            log = [(s, st, _to_g(b, D), sec) for (s, st, b, sec) in cert.log]
            if cert.converged:
                best, status, solver, primal = _to_g(cert.bound, D), cert.status, cert.solver, _to_g(cert.primal, D)
                gap = best - primal
        else:
            chains, edges = linf_start_facets(D)
            prob, P, V = build_varying_program(n, D.d, "linf", SLOTS, upper_cone, monotone_points, D.deviation)
            note_construction(key=(n, D.d, "linf", SLOTS, upper_cone, monotone_points, D.deviation))
            El, Ehat, (tau_lo, tau_hi) = set_varying_parameters(P, D)
            best, status, solver, primal, rounds, n_facets, log, gap = cutting_plane_solve(
                prob, P, V, varying_box(V, D, tau_hi, tau_lo), chains, edges, SLOTS, D.scales[:, :2],
                lambda b: _to_g(b, D), ladder)
    return settle(best, fo, t0, "varying", status=status, solver=solver, primal=primal, rounds=rounds,
                  n_facets=n_facets, log=log, no_solve_reason=why or "not_run", dual_gap=gap)
