"""Second-order certificate, varying query, with factored weights: the query's score shift gets its own level.

Setting and coordinates as in `unfactored` (tokens permuted so that the query token is last, m = n - 1 keys):
key j scores s_j = A_j + sigma_j + eta_j + beta_j + e_j with (sigma_j, omega_j) in P (key/value shift of
token j), eta_j = p_j.delta_i in [-H_j, H_j] (the query's shift seen through key j), beta_j in [-bb, bb] (the
bilinear term), |e_j| <= eps_j (data error); the query token scores A_i + sigma_i^+ + beta_i + e_i with
(sigma_i^+, omega_i) in P_i. With `center` the common query direction is removed first (`VaryingData`).

Factorization. With tau = 1 / sum_k e^{s_k}, every key weight is a product of a query factor and a key factor,

    a_j = b_j e^{A_j + sigma_j + beta_j + e_j},      b_j = tau e^{eta_j}                    (j < m),
    a_i = tau e^{A_i + sigma_i^+ + beta_i + e_i}                                           (query token).

The unfactored program (`unfactored`) sandwiches a_j / tau between e^{s} and the secant of exp over the whole score
interval of
half-width h_j = R_s + H_j + bb, whose band e^{2 h_j} (and secant error ~ h_j^2 / 2) is what the gap pays.
Here the query factor b_j has its own exact convex envelope over [-H_j, H_j], and the key factor a_j / b_j
is the fixed-query relaxation of `rows` with half-width hk_j = R_s + bb and *base* b_j instead of tau
(every pointwise constraint of that relaxation, multiplied by b_j >= 0 instead of tau, still holds). The
secant errors multiply instead of adding in the exponent: cosh(R) cosh(H) - 1 instead of cosh(R + H) - 1.

Program (units as in `rows`: btilde_j = e^{H_j} b_j = tau + kb_j mu_j, kb_j = e^{2 H_j} - 1,
etahat_j = (tau-scaled eta_j) / H_j = (r V^T W)_j, the witness W = tau delta_i / r in tau B_1):

    maximize    sum_j E_lj ( base_j wt_j + kappa_j lam_j wt_j + rho_w (V_j,omega + Ehat_j U_j,omega) ) / rho_o
    subject to  base = (btilde_1, ..., btilde_m, tau),   sum_j E_lj (base_j + kappa_j lam_j) = 1           (C0)
                btilde_j = tau + kb_j mu_j,  0 <= mu_j <= tau,  etahat_j = (r V^T W)_j                      (b level)
                (H_j (etahat_j + tau), tau, btilde_j) in K_exp         (btilde >= tau e^{H (etahat + 1)}: exact)
                2 mu_j <= etahat_j + tau                               (secant of e^{H(t+1)} on [-1, 1]: exact)
                (C1)-(C4) of `rows` for a_j / E_lj = base_j + kappa_j lam_j, with half-width hk_j, base_j
                in place of tau and the unit score (R sigma_hat + bb beta_hat) / hk_j of U_j, V_j,
                U_j,(sigma, omega) in lam_j P_j,  V_j,(sigma, omega) in (base_j - lam_j) P_j,
                |U_j,beta| <= lam_j,  |V_j,beta| <= base_j - lam_j,
                (U_i + V_i)_(sigma, omega) = (r V^T W)_(i, i+1),   W in tau B_1,

E_lj = e^{A_j - H_j - hk_j - eps_j}, kappa_j = e^{2 hk_j + 2 eps_j} - 1 (H_i = 0 for the query token). The
b-level pair is the exact convex hull of {(tau, tau t, tau e^{H(t+1)}) : t in [-1, 1]}. Every lifted true
perturbation (tau, b_j, mu_j = tau (e^{eta_j + H_j} - 1) / kb_j, lam_j = btilde_j (e^{sigma + beta + e + hk + eps}
- 1) / kappa_j, U_j = lam_j xhat_j, V_j = (btilde_j - lam_j) xhat_j) is feasible, so the optimum bounds max g;
the returned number is g0 + the weak-duality bound of `weak_duality` over a box containing every lifted
true point, never the solver's primal. Units with tiny widths (a key's H_j or any hk_j below
`DEVIATION_BELOW`, where the cones would be degenerate) and n = 1 use the unfactored `unfactored` program.
"""
from __future__ import annotations

import math
import time

import numpy as np

from attncert.certify.second_order.dual_bound.solve_ladder import SOLVER_LADDER, solve_and_certify
from attncert.certify.second_order.dual_bound.dual_record import note_construction
from attncert.certify.second_order.relaxation.cutting_planes import cutting_plane_solve
from attncert.certify.second_order.relaxation.facets import SLOTS
from attncert.certify.second_order.relaxation.key_support_cut import start_support, support_excess
from attncert.certify.second_order.relaxation.rows import (DEVIATION_BELOW, MONOTONE_POINTS, SecondOrderResult,
                                                      settle)
from attncert.certify.second_order.varying_query.unfactored import (_to_g, linf_start_facets, prepared_varying,
                                                                   second_order_varying)
from attncert.certify.second_order.varying_query.program import (SUPPORT_SLOTS, build_factored_program,
                                                                    factored_box, fill_support,
                                                                    set_factored_parameters, support_cut_rows, widths)
from attncert.head.problem import HeadProblem
from attncert.head.reduced_geometry import ReducedGeometry

# The factored program's solver attempts: the Clarabel rungs of SOLVER_LADDER at tolerance 1e-8 (not 1e-10), no
# SCS. On GPT-2-shaped units (n = 5, d = 768) the last 1e-10 cost ~1/3 of the interior-point iterations for a
# certified bound lower by a median 4e-6 of the movement (the bound is weak duality over the box, whatever the
# tolerance), and SCS took 1.6-3.3 s where every Clarabel rung stalled; when they all fail the unfactored program
# (with its own ladder, SCS included) is the next sound attempt (docs/certificate.md section 5.1).
FACTORED_LADDER = tuple((s, dict(o, tol_gap_abs=1e-8, tol_gap_rel=1e-8, tol_feas=1e-8))
                        for s, o in SOLVER_LADDER if s == "CLARABEL")
# linf (with the keys' support cuts): Clarabel's min_switch_step_length 0.01 (default 0.1), as the long program's
# ladder. On a GPT-2-sized unit with 16 keys (r = 0.02) every rung with the default stopped at "insufficient
# progress" after ~35 iterations (0.05 s); with 0.01 the first rung solved.
FACTORED_LINF_LADDER = tuple((s, dict(o, min_switch_step_length=0.01)) for s, o in FACTORED_LADDER)
# Cutting planes stop once the edges violated under the solution (and the support cut at the solve's multiplier)
# weigh <= this x the primal (objective units, where the first-order bound is at most 1 and the primal near it: about
# 1-2 % of the first-order gap). The fixed query's CUT_STOP (1e-5) made most varying units solve 2-3 times to lower
# the bound by ~1e-5 of the movement, a gap of 5-20% of it. Not 1e-4 x the first-order gap (the long path's stop,
# `long.CUT_STOP`): at up to 16 keys it gained nothing (GPT-2-sized heads, 16 keys, 48 units: every bound within 8e-5
# of the movement; the default run's main table: median varying gaps within 0.2 %) and cost the default run's varying
# units ~45 % more seconds.
VARYING_CUT_STOP = 1e-4


def second_order_varying_factored(problem: HeadProblem, geo: ReducedGeometry, monotone_points: int = MONOTONE_POINTS,
                                  ladder=None, center: bool = True, second: bool = True,
                                  upper_cone: bool = False) -> SecondOrderResult:
    """Sound upper bound on max g for a varying query with factored weights (see the module docstring).

    ladder: the solver attempts of both programs; None: FACTORED_LADDER (linf FACTORED_LINF_LADDER) for the factored
    program, SOLVER_LADDER for the unfactored one (tiny widths, or when every factored attempt fails)."""
    if problem.mode != "varying":
        raise ValueError("second_order_varying_factored expects mode='varying'")
    t0 = time.perf_counter()
    fo, D, why = prepared_varying(problem, geo, center, "varying_factored")
    if why:
        return settle(math.inf, fo, t0, "varying", no_solve_reason=why)
    Hf, hk = widths(D)
    if D.n < 2 or float(np.min(Hf[:-1])) < DEVIATION_BELOW or float(np.min(hk)) < DEVIATION_BELOW:
        return _unfactored(problem, geo, upper_cone, monotone_points, ladder or SOLVER_LADDER, center, "tiny width", t0)
    default = FACTORED_LINF_LADDER if problem.norm == "linf" else FACTORED_LADDER
    res = _solve(problem, D, monotone_points, ladder or default, second, upper_cone, fo, t0)
    if res.fallback:  # the factored solve failed: the unfactored program is another sound attempt
        return _unfactored(problem, geo, upper_cone, monotone_points, ladder or SOLVER_LADDER, center,
                           f"factored {res.status}", t0)
    return res


def _unfactored(problem, geo, upper_cone, monotone_points, ladder, center, why, t0) -> SecondOrderResult:
    """The unfactored program of `unfactored` (sound; its own fallback is the labelled first-order bound)."""
    res = second_order_varying(problem, geo, upper_cone=upper_cone, monotone_points=monotone_points, ladder=ladder,
                               center=center)
    res.status = f"{res.status} (unfactored: {why})"
    res.seconds = time.perf_counter() - t0
    return res


def _solve(problem, D, monotone_points, ladder, second, upper_cone, fo, t0) -> SecondOrderResult:
    n = D.n
    support = SUPPORT_SLOTS if problem.norm == "linf" else 0
    prob, P, V = build_factored_program(n, D.d, problem.norm, SLOTS, monotone_points, second, upper_cone, support)
    note_construction(key=(n, D.d, problem.norm, SLOTS, monotone_points, second, upper_cone, support))
    tau_lo, tau_hi, Hf = set_factored_parameters(P, D)
    box = factored_box(V, D, tau_lo, tau_hi, Hf)
    if problem.norm == "l2":
        cert = solve_and_certify(prob, box, ladder=ladder)
        log = [(s, st, _to_g(b, D), sec) for (s, st, b, sec) in cert.log]
        best, status, solver, primal, gap = math.inf, cert.status, cert.solver, math.nan, math.nan
        if cert.converged:
            best, primal = _to_g(cert.bound, D), _to_g(cert.primal, D)
            gap = best - primal
        return settle(best, fo, t0, "varying", status=status, solver=solver, primal=primal, rounds=1, log=log,
                      dual_gap=gap)
    chains, edges = linf_start_facets(D)
    out = cutting_plane_solve(
        prob,
        P,
        V,
        box,
        chains,
        edges,
        SLOTS,
        D.scales[:, :2],
        lambda b: _to_g(b, D),
        ladder,
        base_of=lambda v: np.concatenate([np.asarray(v["bt"]).ravel(), [float(v["tau"])]]),
        cut_stop=VARYING_CUT_STOP,
        more_cuts=KeysSupportCuts(P, D, (fo - D.g0 - D.tail) / D.rho_o),
    )
    best, status, solver, primal, rounds, n_facets, log, gap = out
    return settle(best, fo, t0, "varying", status=status, solver=solver, primal=primal, rounds=rounds,
                  n_facets=n_facets, log=log, dual_gap=gap)


class KeysSupportCuts:
    """The keys' support cuts (`key_support_cut`) of the linf program in its cutting-plane loop: the first solve
    carries them at `start_support`, every later solve adds its own multiplier while that cut removes more than the
    loop's stop from the solved point (at most SUPPORT_SLOTS). A solve's multiplier is its primal objective: the
    program is homogeneous apart from the normalization, so at an optimum the normalization's multiplier equals
    the optimal value. GPT-2-sized heads (random-gpt2, linf): docs/certificate.md section 5.2."""

    def __init__(self, P: dict, D, fo_obj: float):
        self.P, self.D = P, D
        self.ts = start_support(fo_obj)[:SUPPORT_SLOTS]

    def fill(self):
        fill_support(self.P, self.D, self.ts)
        note_construction(support_ts=np.array(self.ts, dtype=np.float64))

    def grow(self, values: dict, primal: float, stop: float) -> bool:
        m = self.D.n - 1
        if len(self.ts) >= self.P["sup_base"].shape[0] or not math.isfinite(primal) or m < 1:
            return False
        rows = support_cut_rows(self.D, [primal])
        U, V = np.asarray(values["U"]), np.asarray(values["V"])
        excess = support_excess(rows[0], np.asarray(self.P["n_base"].value)[:m], np.asarray(values["bt"]),
                                np.asarray(values["lam"])[:m], V[:m, 1], U[:m, 1])
        if not excess > stop:
            return False
        self.ts.append(primal)
        return True
