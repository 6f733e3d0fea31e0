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
chosen by the same cutting planes as the fixed query. Every coordinate is in units of its own range
(sigma by R_s or R_q, omega by R_w, eta_j by H_j, beta by bb; a coordinate whose range is 0 is fixed at 0),
with the unit score (R sigma_hat + H eta_hat + bb beta_hat) / h_j carried by two auxiliary variables SU, SV
(the unit score of U and V) so that every row keeps one parameter per variable.
"""
from __future__ import annotations

import math
import time

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.dual_certificate import SOLVER_LADDER, solve_and_certify
from attncert.certify.second_order.dual_record import note_affine
from attncert.certify.second_order.cutting_planes import cutting_plane_solve, vertex_dinkelbach
from attncert.certify.second_order.facets import SLOTS, UpperChainFacets, initial_edges
from attncert.certify.second_order.relaxation import (DEVIATION_BELOW, MONOTONE_POINTS, SecondOrderResult,
                                                      ellipse_matrix, fallback_bound,
                                                      nu_bound, objective, polygon_constraints, representable, settle,
                                                      weight_constraints, weight_parameters)
from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.problem import HeadProblem, cached_by_weights
from attncert.head.negligible_tokens import negligible_tokens
from attncert.head.reduced_geometry import reduced_geometry
from attncert.head.rounding import UNIT_ROUNDOFF, gamma, outward_affine

_CACHE: dict = {}
_LOW = -650.0  # lowest representable log lower weight of the (never dropped) query token


@cached_by_weights()  # a per-head constant: computed once per head
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
    """Reduced data of a varying-query unit, tokens permuted so that the query token is last.

    Coordinates of token j: (sigma, omega, eta, beta), each in units of its own range `scales[j]`
    (a coordinate whose range is 0 is identically 0: unit 1, `active` 0). The score shift
    sigma + eta + beta lies in [-h_j, h_j]; the unit score is (R sigma_hat + H eta_hat + bb beta_hat) / h_j.
    """

    def __init__(self, problem: HeadProblem, fo: float, center: bool = False):
        """center: subtract the common query direction pbar (coordinatewise median of the p_j) from every score.

        Softmax is invariant under a common shift of the scores, so s_j - pbar.delta_i (every j, the query token
        too) gives the same head for any fixed vector pbar: p_j becomes p_j - pbar and the query token's own
        direction u_s + p_i - pbar. The rounding of the subtraction (<= u |p_j - pbar|.|delta_i| per token) is
        added to the score error eps_j. It narrows H_j where the keys share a component (biases, common
        directions of the tokens).
        """
        n, d, dh, r = problem.n, problem.d, problem.d_head, problem.radius
        i = problem.query_index
        self.order = np.array([j for j in range(n) if j != i] + [i])
        dual = problem.dual_norm
        up = 1.0 + gamma(d + 4)
        s0, w0, u_s, u_w = fixed_query_reduction(problem).directions()
        eps_w = reduced_geometry(problem).eps_w
        sq = math.sqrt(dh)
        K0 = problem.Z0 @ problem.W_K + problem.b_K
        p = (K0 @ problem.W_Q.T) / sq  # (n, d): p_j = W_Q k0_j / sqrt(d_h)
        shift_err = np.zeros(n)
        if center:
            pbar = np.median(p, axis=0)
            p = p - pbar
            shift_err = 4.0 * UNIT_ROUNDOFF * r * np.array([dual(np.abs(p[j])) for j in range(n)]) + 1e-300
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
        R = np.where(np.arange(n) < n - 1, self.R_s, self.R_q)
        self.h = (R + self.H + self.bb) * (1.0 + 4.0 * UNIT_ROUNDOFF)  # total score shift in [-h_j, h_j]
        rng = np.stack([R, np.full(n, self.R_w), self.H, np.full(n, self.bb)], axis=1)
        self.active = (rng > 0).astype(np.float64)
        self.scales = np.where(rng > 0, rng, 1.0)
        # rounding envelope of every score term (absolute values), as for the first-order intervals
        zi = np.abs(problem.Z0[i])
        q_env = (zi + r) @ np.abs(problem.W_Q) + np.abs(problem.b_Q)
        k_env = (np.abs(problem.Z0) + r) @ np.abs(problem.W_K) + np.abs(problem.b_K)
        self.eps = (8.0 * gamma(3 * d + 3 * dh + 50) * (k_env @ q_env) / sq + shift_err)[o]
        shift = float(np.max(s0[o] + self.eps))
        self.A = s0[o] - shift
        self.rho_w = self.scales[0, 1]
        self.rho_o = max(fo - self.g0, self.R_w, 1e-300) if math.isfinite(fo) else max(self.R_w, 1.0)
        # query-side map in unit coordinates, rows: eta_j (j != i), sigma_i^+, omega_i
        self.Vt = np.vstack([self.p[:-1] * (r / self.scales[:-1, 2:3]) * self.active[:-1, 2:3],
                             (self.u_q * (r / self.scales[-1, 0]))[None, :],
                             (u_w * (r / self.rho_w))[None, :]])
        self.radius, self.norm, self.n, self.d = r, problem.norm, n, d
        self.deviation = bool(np.min(self.h) < DEVIATION_BELOW)
        self.tail = 0.0  # sound bound on the effect of dropped (negligible) tokens

    def drop_negligible(self) -> "VaryingData":
        """Drop the key tokens that can never carry weight (`head.negligible_tokens`; never the query)."""
        top = self.w0 + self.R_w + self.eps_w
        keep, tail = negligible_tokens(self.A, self.h, self.eps, top + 4.0 * UNIT_ROUNDOFF * np.abs(top),
                                       self.w0 - self.R_w - self.eps_w, keep_always=self.n - 1)
        q = self.n - 1
        low = self.A[q] - self.h[q] - self.eps[q]
        if np.all(keep) and low >= _LOW:
            return self
        if low < _LOW:
            # the query token cannot be dropped (its perturbation moves every score): raise its nominal score
            # so that its lower weight bound is representable. For any perturbation, with g' the head without
            # it, |g - g'| <= e_q |w_q - g'| / Z' and the raised head's likewise with c e_q (c >= 1), so the bound
            # of the raised head plus 2 c e_q^max / Z_lo (W_max - W_min) bounds max g.
            A_new = _LOW + self.h[q] + self.eps[q]
            lower = self.A[keep] - self.h[keep] - self.eps[keep]
            m = float(np.max(lower))
            logZ = m + math.log(float(np.sum(np.exp(lower - m))))
            spread = float(np.max(top) - np.min(self.w0 - self.R_w - self.eps_w))
            tail += 8.0 * math.exp(A_new + self.h[q] + self.eps[q] - logZ) * spread + 1e-300
            self.A = self.A.copy()
            self.A[q] = A_new
        for name in ("order", "w0", "eps_w", "p", "H", "h", "active", "scales", "eps", "A"):
            setattr(self, name, getattr(self, name)[keep])
        self.Vt = np.vstack([self.Vt[: self.n - 1][keep[:-1]], self.Vt[self.n - 1:]])
        self.n = int(keep.sum())
        self.deviation = bool(np.min(self.h) < DEVIATION_BELOW)
        self.tail = tail
        return self


def _build(n: int, d: int, norm: str, K: int, upper_cone: bool, mono: int, deviation: bool):
    key = ("varying", n, d, norm, K, upper_cone, mono, deviation)
    if key in _CACHE:
        return _CACHE[key]
    tau = cp.Variable(name="tau")
    lam = cp.Variable(n, name="lam")
    U = cp.Variable((n, 4), name="U")  # coordinates (units): sigma, omega, eta, beta
    V = cp.Variable((n, 4), name="V")
    SU = cp.Variable(n, name="SU")  # unit score coordinate of U and V
    SV = cp.Variable(n, name="SV")
    W = cp.Variable(d, name="W")  # witness tau * delta_i / r
    nu = cp.Variable(n, name="nu") if deviation else None
    P: dict = {}
    tau_n = tau * np.ones(n)
    for name in ("ks", "ke", "kb", "ie", "ib"):
        P[name] = cp.Parameter(n, nonneg=True, name=name)
    def score(Y):  # unit score coordinate (sigma, eta, beta each in its own unit)
        return cp.multiply(P["ks"], Y[:, 0]) + cp.multiply(P["ke"], Y[:, 2]) + cp.multiply(P["kb"], Y[:, 3])

    cons = [SU == score(U), SV == score(V)]
    cons += weight_constraints(P, n, tau, lam, SU, SV, upper_cone, mono, nu)
    for c, act in ((2, P["ie"]), (3, P["ib"])):  # intervals (two rows each)
        mU = cp.multiply(act, lam)
        mV = cp.multiply(act, tau_n - lam)
        cons += [U[:, c] <= mU, -U[:, c] <= mU, V[:, c] <= mV, -V[:, c] <= mV]
    P["Vt"] = cp.Parameter((n + 1, d), name="Vt")
    Y = P["Vt"] @ W
    if n > 1:
        cons.append(U[: n - 1, 2] + V[: n - 1, 2] == Y[: n - 1])
    cons += [U[n - 1, 0] + V[n - 1, 0] == Y[n - 1], U[n - 1, 1] + V[n - 1, 1] == Y[n]]
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
    variables = dict(tau=tau, lam=lam, U=U, V=V, SU=SU, SV=SV, W=W)
    if nu is not None:
        variables["nu"] = nu
    entry = (cp.Problem(objective(P, tau, lam, U[:, 1], V[:, 1]), cons), P, variables)
    _CACHE[key] = entry
    return entry


def _set_parameters(P: dict, D: VaryingData):
    El, Ehat, tau_lo, tau_hi = weight_parameters(P, D.A, D.h, D.eps, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w)
    k = D.scales * D.active / D.h[:, None]
    P["ks"].value, P["ke"].value, P["kb"].value = k[:, 0], k[:, 2], k[:, 3]
    act = D.active * (1.0 + 4.0 * UNIT_ROUNDOFF)
    P["ie"].value, P["ib"].value = act[:, 2], act[:, 3]
    P["Vt"].value = D.Vt
    if "G" in P:
        P["G"].value, P["cs"].value = ellipse_matrix(D.u_s, D.u_w, D.radius, D.scales[0, 0], D.rho_w)
        P["Gq"].value, P["csq"].value = ellipse_matrix(D.u_q, D.u_w, D.radius, D.scales[-1, 0], D.rho_w)
    return El, Ehat, (tau_lo, tau_hi)


def _box(V: dict, D: VaryingData, tau_hi: float, tau_lo: float) -> dict:
    """A box containing every lifted true point (the certification box of `dual_certificate`)."""
    n, inflate = D.n, 1.0 + 1e-9
    unit = np.where(D.active > 0, 1.0, 0.0) * inflate  # |coordinate| <= its range = 1 unit
    up = np.full(n, tau_hi * inflate)
    box = {V["tau"]: (tau_lo, tau_hi), V["lam"]: (np.zeros(n), up),
           V["U"]: (-unit * up[:, None], unit * up[:, None]), V["V"]: (-unit * tau_hi, unit * tau_hi),
           V["SU"]: (-up, up), V["SV"]: (np.full(n, -tau_hi * inflate), np.full(n, tau_hi * inflate)),
           V["W"]: (np.full(D.d, -tau_hi * inflate), np.full(D.d, tau_hi * inflate))}
    if "nu" in V:
        box[V["nu"]] = (np.zeros(n), nu_bound(D.h, D.eps, tau_hi))
    return box


def linf_start_facets(D: VaryingData) -> tuple[list, list]:
    """linf: each token's upper facet chain (keys from u_s, the query position from u_q) and the starting
    edges around the vertex that the boundary Dinkelbach estimate picks (`facets.initial_edges`)."""
    n = D.n
    chains = [UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s)] * (n - 1)
    chains.append(UpperChainFacets(D.u_q, D.u_w, D.radius, D.R_q))
    sig = np.stack([c.chain.sigma for c in chains])
    om = np.stack([c.chain.omega for c in chains])
    _, k = vertex_dinkelbach(D.A, D.w0, D.g0, sig, om)
    return chains, initial_edges(chains, k)


def _to_g(bound: float, D: VaryingData) -> float:
    """g0 + rho_o * bound (+ the dropped tokens' tail), rounded outward."""
    note_affine(D.g0, D.rho_o, D.tail)
    return outward_affine(D.g0, D.rho_o, bound, D.tail)


def second_order_varying(problem: HeadProblem, upper_cone: bool = False, monotone_points: int = MONOTONE_POINTS,
                         ladder=SOLVER_LADDER, center: bool = False) -> SecondOrderResult:
    """Sound upper bound on max g for a varying query (see module docstring; center: `VaryingData`)."""
    if problem.mode != "varying":
        raise ValueError("second_order_varying expects mode='varying'")
    t0 = time.perf_counter()
    fo = fallback_bound(problem)
    D = VaryingData(problem, fo, center)
    best, status, solver, primal, rounds, n_facets, log, gap = math.inf, "not_run", "none", math.nan, 0, 0, [], math.nan
    why = "degenerate score intervals" if not np.all(D.h > 1e-9) else representable(D.A, D.h, D.eps, width_only=True)
    if not why:
        D = D.drop_negligible()
        why = representable(D.A, D.h, D.eps)
    n = D.n
    if not why:
        if problem.norm == "l2":
            prob, P, V = _build(n, D.d, "l2", 0, upper_cone, monotone_points, D.deviation)
            El, Ehat, (tau_lo, tau_hi) = _set_parameters(P, D)
            cert = solve_and_certify(prob, _box(V, D, tau_hi, tau_lo), ladder=ladder)
            rounds = 1
            log = [(s, st, _to_g(b, D), sec) for (s, st, b, sec) in cert.log]
            if cert.converged:
                best, status, solver, primal = _to_g(cert.bound, D), cert.status, cert.solver, _to_g(cert.primal, D)
                gap = best - primal
        else:
            chains, edges = linf_start_facets(D)
            prob, P, V = _build(n, D.d, "linf", SLOTS, upper_cone, monotone_points, D.deviation)
            El, Ehat, (tau_lo, tau_hi) = _set_parameters(P, D)
            best, status, solver, primal, rounds, n_facets, log, gap = cutting_plane_solve(
                prob, P, V, _box(V, D, tau_hi, tau_lo), chains, edges, SLOTS, D.scales[:, :2],
                lambda b: _to_g(b, D), ladder)
    return settle(best, fo, t0, "varying", status=status, solver=solver, primal=primal, rounds=rounds,
                  n_facets=n_facets, log=log, no_solve_reason=why or "not_run", dual_gap=gap)
