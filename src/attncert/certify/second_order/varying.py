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

Relaxation. Exactly the fixed-query program of `fixed` (built from `relaxation`) with per-token intervals
[l_j, -l_j], extended coordinates and the coupling of the query coordinates:

    maximize    sum_j E_lj ( ahat_j wt_j + V_j,omega + Ehat_j U_j,omega )
    subject to  sum_j E_lj ahat_j = 1,   ahat_j = tau + kappa_j lam_j,   0 <= lam_j <= tau,
                (Stot_j - l_j tau, tau, ahat_j) in K_exp,      Stot = (U_j + V_j)_(sigma + eta + beta),
                kappa_j lam_j <= (e^{2 eps_j} - 1) tau + e^{2 eps_j} c_j (Stot_j - l_j tau),
                E_tau[(e - E_c)(s - c)] >= -margin at interior score points c     (monotonicity cuts),
                [tight variant] (-(2 eps_j - l_j) ahat_j - Mtot_j, ahat_j, tau) in K_exp,  Mtot = (V + Ehat U)_(sigma + eta + beta),
                (U_j,sigma, U_j,omega) in lam_j P_j,  (V_j,sigma, V_j,omega) in (tau - lam_j) P_j,
                |U_j,eta| <= lam_j H_j, |V_j,eta| <= (tau - lam_j) H_j, the same for beta with bb,
                (U_j + V_j)_eta = (r V^T W)_j (j != i),  (U_i + V_i)_(sigma, omega) = (r V^T W)_(i, i+1),
                W in tau B_1.

Every lifted true perturbation is feasible, so the optimum bounds max g; the returned number is
g0 + the weak-duality bound of `dual_certificate` (never the solver's primal), with facets of P and P_i
chosen by the same cutting planes as the fixed query. Coordinates are scaled by rho.
"""
from __future__ import annotations

import math
import time

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
from attncert.head.rounding import UNIT_ROUNDOFF, gamma, outward_affine

_CACHE: dict = {}


def bilinear_norm(W_Q: np.ndarray, W_K: np.ndarray, norm: str) -> float:
    """beta >= max_{||x||, ||y|| <= 1} x W_Q W_K^T y^T (outward rounded)."""
    d, dh = W_Q.shape
    GQ, GK = W_Q.T @ W_Q, W_K.T @ W_K
    jitter = 1e-12 * float(np.trace(GK)) + 1e-300
    L = np.linalg.cholesky(GK + jitter * np.eye(dh))
    lam = float(np.linalg.eigvalsh(L.T @ GQ @ L)[-1])
    lam += 8.0 * gamma(d + 3 * dh + 10) * float(np.trace(GQ)) * float(np.trace(GK))
    spec = math.sqrt(max(lam, 0.0)) * (1.0 + 1e-14)
    if norm == "l2":
        return spec
    entry = float(np.abs(W_Q @ W_K.T).sum()) * (1.0 + 2.0 * gamma(dh + d * d + 4))
    return min(entry, d * spec)


class VaryingData:
    """Reduced data of a varying-query unit, tokens permuted so that the query token is last."""

    def __init__(self, problem: HeadProblem):
        n, d, dh, r = problem.n, problem.d, problem.d_head, problem.radius
        i = problem.query_index
        self.order = np.array([j for j in range(n) if j != i] + [i])
        dual = problem.dual_norm
        up = 1.0 + gamma(d + 4)
        s0, w0, u_s, u_w = fixed_query_reduction(problem).directions()
        _, eps_w = data_errors(problem)
        sq = math.sqrt(dh)
        K0 = problem.Z0 @ problem.W_K + problem.b_K
        p = (K0 @ problem.W_Q.T) / sq  # (n, d): p_j = W_Q k0_j / sqrt(d_h)
        o = self.order
        self.w0, self.eps_w = w0[o], eps_w[o]
        self.g0 = problem.nominal_value()
        self.u_s, self.u_w = u_s, u_w
        self.u_q = u_s + p[i]  # score direction of the query token's own perturbation
        self.p = p[o]
        self.R_s = r * dual(u_s) * up
        self.R_q = r * dual(self.u_q) * up
        self.R_w = r * dual(u_w) * up
        self.H = np.array([r * dual(self.p[j]) * up for j in range(n)])
        self.H[-1] = 0.0  # the query token's eta is part of sigma_i^+
        self.bb = r * r * bilinear_norm(problem.W_Q, problem.W_K, problem.norm) / sq * up
        half = np.where(np.arange(n) < n - 1, self.R_s + self.H, self.R_q) + self.bb
        self.l = -half  # total score shift of token j lies in [l_j, -l_j]
        # rounding envelope of every score term (absolute values), as for the first-order intervals
        zi = np.abs(problem.Z0[i])
        q_env = (zi + r) @ np.abs(problem.W_Q) + np.abs(problem.b_Q)
        k_env = (np.abs(problem.Z0) + r) @ np.abs(problem.W_K) + np.abs(problem.b_K)
        self.eps = (8.0 * gamma(3 * d + 3 * dh + 50) * (k_env @ q_env) / sq)[o]
        shift = float(np.max(s0[o] + self.eps))
        self.A = s0[o] - shift
        self.rho = float(self.R_w + np.max(half))
        # query-side map, rows: p_j (j != i), u_s + p_i, u_w
        self.Vt = np.vstack([self.p[:-1], self.u_q[None, :], u_w[None, :]])
        self.radius, self.norm, self.n, self.d = r, problem.norm, n, d


def _build(n: int, d: int, norm: str, K: int, upper_cone: bool, mono: int):
    key = ("varying", n, d, norm, K, upper_cone, mono)
    if key in _CACHE:
        return _CACHE[key]
    tau = cp.Variable(name="tau")
    lam = cp.Variable(n, name="lam")
    U = cp.Variable((n, 4), name="U")  # coordinates: sigma, omega, eta, beta
    V = cp.Variable((n, 4), name="V")
    W = cp.Variable(d, name="W")  # witness tau * delta_i / r
    P: dict = {}
    tau_n = tau * np.ones(n)
    score = np.array([1.0, 0.0, 1.0, 1.0])  # the score shift is sigma + eta + beta (omega is the value)
    cons = weight_constraints(P, n, tau, lam, U @ score, V @ score, upper_cone, mono)
    P["h_eta"] = cp.Parameter(n, nonneg=True, name="h_eta")
    P["h_beta"] = cp.Parameter(n, nonneg=True, name="h_beta")
    for c, hc in ((2, P["h_eta"]), (3, P["h_beta"])):  # intervals (two linear rows each: no auxiliaries)
        for Yv, mass in ((U, lam), (V, tau_n - lam)):
            cons += [Yv[:, c] <= cp.multiply(hc, mass), -Yv[:, c] <= cp.multiply(hc, mass)]
    P["Vt"] = cp.Parameter((n + 1, d), name="Vt")
    Y = P["Vt"] @ W
    S = U + V
    if n > 1:
        cons.append(S[: n - 1, 2] == Y[: n - 1])
    cons += [S[n - 1, 0] == Y[n - 1], S[n - 1, 1] == Y[n]]
    if norm == "l2":
        cons.append(cp.SOC(tau, W))
        for name in ("G", "Gq"):
            P[name] = cp.Parameter((2, 2), name=name)
        P["cs"] = cp.Parameter(nonneg=True, name="cs")
        P["csq"] = cp.Parameter(nonneg=True, name="csq")
        m = n - 1
        if m:
            cons += [cp.SOC(P["cs"] * lam[:m], P["G"] @ U[:m, :2].T, axis=0),
                     cp.SOC(P["cs"] * (tau_n[:m] - lam[:m]), P["G"] @ V[:m, :2].T, axis=0)]
        cons += [cp.SOC(P["csq"] * lam[m], P["Gq"] @ U[m, :2]),
                 cp.SOC(P["csq"] * (tau - lam[m]), P["Gq"] @ V[m, :2])]
    else:
        cons += [W <= tau, -W <= tau]
        cons += polygon_constraints(P, n, K, U, V, lam, tau_n)
    entry = (cp.Problem(objective(P, tau, lam, U[:, 1], V[:, 1]), cons), P,
             dict(tau=tau, lam=lam, U=U, V=V, W=W))
    _CACHE[key] = entry
    return entry


def _set_parameters(P: dict, D: VaryingData):
    El, Ehat, tau_lo, tau_hi = weight_parameters(P, D.A, -D.l, D.eps, D.w0, D.eps_w, D.g0, D.rho)
    P["h_eta"].value = D.H / D.rho * (1.0 + 4.0 * UNIT_ROUNDOFF)
    P["h_beta"].value = np.full(D.n, D.bb / D.rho * (1.0 + 4.0 * UNIT_ROUNDOFF))
    P["Vt"].value = D.Vt * (D.radius / D.rho)
    return El, Ehat, (tau_lo, tau_hi)


def _box(V: dict, D: VaryingData, tau_hi: float, tau_lo: float) -> dict:
    n, inflate = D.n, (1.0 + 1e-9) * tau_hi / D.rho
    sig = np.where(np.arange(n) < n - 1, D.R_s, D.R_q)
    hi = np.stack([sig, np.full(n, D.R_w), D.H, np.full(n, D.bb)], axis=1) * inflate
    return {V["tau"]: (tau_lo, tau_hi), V["lam"]: (np.zeros(n), np.full(n, tau_hi)), V["U"]: (-hi, hi),
            V["V"]: (-hi, hi), V["W"]: (np.full(D.d, -tau_hi), np.full(D.d, tau_hi))}


def _to_g(bound: float, D: VaryingData) -> float:
    """g0 + rho * bound, rounded outward (plus a tiny term for exp underflow of far-away tokens)."""
    return outward_affine(D.g0, D.rho, bound, 1e-290 * D.n * (1.0 + float(np.abs(D.w0).max())))


def second_order_varying(problem: HeadProblem, upper_cone: bool = False, monotone_points: int = MONOTONE_POINTS,
                         ladder=SOLVER_LADDER) -> SecondOrderResult:
    """Sound upper bound on max g for a varying query (see module docstring)."""
    if problem.mode != "varying":
        raise ValueError("second_order_varying expects mode='varying'")
    t0 = time.perf_counter()
    D = VaryingData(problem)
    n = D.n
    fo = first_order_certificate(problem)
    best, status, solver, primal, rounds, n_facets, log = math.inf, "not_run", "none", math.nan, 0, 0, []
    if D.rho > 0 and np.all(-D.l > 1e-9):
        if problem.norm == "l2":
            prob, P, V = _build(n, D.d, "l2", 0, upper_cone, monotone_points)
            El, Ehat, (tau_lo, tau_hi) = _set_parameters(P, D)
            P["G"].value, P["cs"].value = ellipse_matrix(D.u_s, D.u_w, D.radius, D.rho)
            P["Gq"].value, P["csq"].value = ellipse_matrix(D.u_q, D.u_w, D.radius, D.rho)
            cert = solve_and_certify(prob, _box(V, D, tau_hi, tau_lo), ladder=ladder)
            rounds = 1
            log = [(s, st, _to_g(b, D), sec) for (s, st, b, sec) in cert.log]
            if cert.converged:
                best, status, solver, primal = _to_g(cert.bound, D), cert.status, cert.solver, _to_g(cert.primal, D)
        else:
            chains = [UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s)] * (n - 1)
            chains.append(UpperChainFacets(D.u_q, D.u_w, D.radius, D.R_q))
            sig = np.stack([c.chain.sigma for c in chains])
            om = np.stack([c.chain.omega for c in chains])
            _, k = vertex_dinkelbach(D.A, D.w0, D.g0, sig, om)
            edges = initial_edges(chains, k)
            prob, P, V = _build(n, D.d, "linf", SLOTS, upper_cone, monotone_points)
            El, Ehat, (tau_lo, tau_hi) = _set_parameters(P, D)
            best, status, solver, primal, rounds, n_facets, log = cutting_plane_solve(
                prob, P, V, _box(V, D, tau_hi, tau_lo), chains, edges, SLOTS, D.rho, El, Ehat,
                lambda b: _to_g(b, D), ladder)
    return settle(best, status, solver, fo, t0, "varying", primal, rounds, n_facets, log, "degenerate score intervals")
