"""Second-order certificate, varying query, with factored weights: the query's score shift gets its own level.

Setting and coordinates as in `varying` (tokens permuted so that the query token is last, m = n - 1 keys):
key j scores s_j = A_j + sigma_j + eta_j + beta_j + e_j with (sigma_j, omega_j) in P (key/value shift of
token j), eta_j = p_j.delta_i in [-H_j, H_j] (the query's shift seen through key j), beta_j in [-bb, bb] (the
bilinear term), |e_j| <= eps_j (data error); the query token scores A_i + sigma_i^+ + beta_i + e_i with
(sigma_i^+, omega_i) in P_i. With `center` the common query direction is removed first (`VaryingData`).

Factorization. With tau = 1 / sum_k e^{s_k}, every key weight is a product of a query factor and a key factor,

    a_j = b_j e^{A_j + sigma_j + beta_j + e_j},      b_j = tau e^{eta_j}                    (j < m),
    a_i = tau e^{A_i + sigma_i^+ + beta_i + e_i}                                           (query token).

The unfactored program (`varying`) sandwiches a_j / tau between e^{s} and the secant of exp over the whole score interval of
half-width h_j = R_s + H_j + bb, whose band e^{2 h_j} (and secant error ~ h_j^2 / 2) is what the gap pays.
Here the query factor b_j has its own exact convex envelope over [-H_j, H_j], and the key factor a_j / b_j
is the fixed-query relaxation of `relaxation` with half-width hk_j = R_s + bb and *base* b_j instead of tau
(every pointwise constraint of that relaxation, multiplied by b_j >= 0 instead of tau, still holds). The
secant errors multiply instead of adding in the exponent: cosh(R) cosh(H) - 1 instead of cosh(R + H) - 1.

Program (units as in `relaxation`: btilde_j = e^{H_j} b_j = tau + kb_j mu_j, kb_j = e^{2 H_j} - 1,
etahat_j = (tau-scaled eta_j) / H_j = (r V^T W)_j, the witness W = tau delta_i / r in tau B_1):

    maximize    sum_j E_lj ( base_j wt_j + kappa_j lam_j wt_j + rho_w (V_j,omega + Ehat_j U_j,omega) ) / rho_o
    subject to  base = (btilde_1, ..., btilde_m, tau),   sum_j E_lj (base_j + kappa_j lam_j) = 1           (C0)
                btilde_j = tau + kb_j mu_j,  0 <= mu_j <= tau,  etahat_j = (r V^T W)_j                      (b level)
                (H_j (etahat_j + tau), tau, btilde_j) in K_exp         (btilde >= tau e^{H (etahat + 1)}: exact)
                2 mu_j <= etahat_j + tau                               (secant of e^{H(t+1)} on [-1, 1]: exact)
                (C1)-(C4) of `relaxation` for a_j / E_lj = base_j + kappa_j lam_j, with half-width hk_j, base_j
                in place of tau and the unit score (R sigma_hat + bb beta_hat) / hk_j of U_j, V_j,
                U_j,(sigma, omega) in lam_j P_j,  V_j,(sigma, omega) in (base_j - lam_j) P_j,
                |U_j,beta| <= lam_j,  |V_j,beta| <= base_j - lam_j,
                (U_i + V_i)_(sigma, omega) = (r V^T W)_(i, i+1),   W in tau B_1,

E_lj = e^{A_j - H_j - hk_j - eps_j}, kappa_j = e^{2 hk_j + 2 eps_j} - 1 (H_i = 0 for the query token). The
b-level pair is the exact convex hull of {(tau, tau t, tau e^{H(t+1)}) : t in [-1, 1]}. Every lifted true
perturbation (tau, b_j, mu_j = tau (e^{eta_j + H_j} - 1) / kb_j, lam_j = btilde_j (e^{sigma + beta + e + hk + eps}
- 1) / kappa_j, U_j = lam_j xhat_j, V_j = (btilde_j - lam_j) xhat_j) is feasible, so the optimum bounds max g;
the returned number is g0 + the weak-duality bound of `dual_certificate` over a box containing every lifted
true point, never the solver's primal. Units with tiny widths (a key's H_j or any hk_j below
`DEVIATION_BELOW`, where the cones would be degenerate) and n = 1 use the unfactored `varying` program.
"""
from __future__ import annotations

import math
import time

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.dual_certificate import SOLVER_LADDER, solve_and_certify
from attncert.certify.second_order.cutting_planes import cutting_plane_solve
from attncert.certify.second_order.facets import SLOTS
from attncert.certify.second_order.relaxation import (DEVIATION_BELOW, MONOTONE_POINTS, SecondOrderResult,
                                                      ellipse_matrix, fallback_bound, polygon_constraints,
                                                      representable, settle, softmax_bounds, weight_parameters)
from attncert.certify.second_order.varying import VaryingData, _to_g, linf_start_facets, second_order_varying
from attncert.head.problem import HeadProblem
from attncert.head.rounding import UNIT_ROUNDOFF

_CACHE: dict = {}
_U = UNIT_ROUNDOFF
# The factored program's solver attempts: the Clarabel rungs of SOLVER_LADDER at tolerance 1e-8 (not 1e-10), no
# SCS. On GPT-2-shaped units (n = 5, d = 768) the last 1e-10 cost ~1/3 of the interior-point iterations for a
# certified bound lower by a median 4e-6 of the movement (the bound is weak duality over the box, whatever the
# tolerance), and SCS took 1.6-3.3 s where every Clarabel rung stalled; when they all fail the unfactored program
# (with its own ladder, SCS included) is the next sound attempt (docs/history/paper_cost_ratio.md, "varying query").
FACTORED_LADDER = tuple((s, dict(o, tol_gap_abs=1e-8, tol_gap_rel=1e-8, tol_feas=1e-8))
                        for s, o in SOLVER_LADDER if s == "CLARABEL")
# Cutting planes stop once the edges violated under the solution weigh <= this x the primal (objective units,
# origin near the optimum). The fixed query's CUT_STOP (1e-5) made most varying units solve 2-3 times to lower
# the bound by ~1e-5 of the movement, a gap of 5-20% of it.
VARYING_CUT_STOP = 1e-4
_WEIGHT_PARAMS = ("c_lam", "c_V", "c_U", "n_lam", "kt", "hV", "hU", "up_tau", "up_lam", "up_V", "up_U",
                  "sec_tau", "sec_U", "sec_V")


QUAD_POINTS = 7  # tangent points xi of the quadratic upper bounds of the query factor (second moments)


def quadratic_rows(H: np.ndarray, k: int = QUAD_POINTS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(qa, qb, qc), each (m, k): mu <= qa tau + qb etahat + qc Q is valid at every lifted true point.

    f(t) = e^{H (t + 1)} on t in [-1, 1]; q_xi(t) = f(xi) + f'(xi)(t - xi) + c (t - xi)^2 with
    c = (f(1) - f(xi) - f'(xi)(1 - xi)) / (1 - xi)^2 is tangent at xi and meets f at t = 1. g = q - f has
    g''' = -f''' < 0, hence at most three zeros (xi double, 1): g'' is decreasing and positive at xi, so g is
    convex with minimum 0 on [-1, xi] and has no zero in (xi, 1): q_xi >= f on [-1, 1]. Multiplied by tau
    (t = etahat / tau, E t^2 = Q / tau) and with btilde = tau + kb mu: kb mu <= tau E q_xi - tau. The
    coefficients are rounded up by a margin covering their floating-point error (|t|, E (t - xi)^2 <= 4).
    """
    H = np.asarray(H, dtype=np.float64)[:, None]
    xi = (-1.0 + 2.0 * np.arange(1, k + 1) / (k + 1))[None, :]
    f = np.exp(H * (xi + 1.0))
    fp = H * f
    x = H * (1.0 - xi)
    c = f * (np.expm1(x) - x) / (1.0 - xi) ** 2
    kb = np.expm1(2.0 * H)
    a = f - fp * xi + c * xi * xi - 1.0
    b = fp - 2.0 * c * xi
    margin = 16.0 * _U * (np.abs(f) + np.abs(fp * xi) + np.abs(c * xi * xi) + 1.0 + np.abs(b)) + 4e-11 * np.abs(c) \
        + 1e-13 * np.exp(2.0 * H)
    return (a + margin) / kb, b / kb, c / kb


PAIRS_UP_TO = 24  # keys up to which every pair gets a budget row; beyond, the pairs of the TOP_KEYS heaviest
TOP_KEYS = 12


def budget_subsets(m: int, order: np.ndarray | None = None) -> np.ndarray:
    """0/1 rows (k, m): every pair of keys (of the TOP_KEYS first of `order` when m > PAIRS_UP_TO), every
    triple when m <= 8, and all keys. k depends on m only (the rows are a Parameter of the cached program)."""
    import itertools

    keys = range(m) if m <= PAIRS_UP_TO else (np.arange(m) if order is None else np.asarray(order))[:TOP_KEYS]
    rows = [c for size in ((2, 3) if m <= 8 else (2,)) for c in itertools.combinations(keys, size)]
    S = np.zeros((len(rows) + 1, m))
    for i, c in enumerate(rows):
        S[i, list(c)] = 1.0
    S[-1] = 1.0
    return S


def query_budget(Vt: np.ndarray, norm: str, S: np.ndarray) -> np.ndarray:
    """Lambda_S >= sum_{j in S} etahat_j^2 for every query perturbation, per row S of the subsets.

    etahat_j = v_j . x with x = delta_i / r in the unit box (linf) or ball (l2), v_j = Vt_j. For B = the rows
    of S and any g > 0: sum_j (v_j . x)^2 = ||B x||^2 <= lambda_max(B diag(1/g) B^T) sum_k g_k x_k^2, and
    sum_k g_k x_k^2 <= sum_k g_k on the box (g = the column norms of B, exact for one row: ||v||_1^2) and
    <= max_k g_k on the ball (g = 1: lambda_max(B B^T)). Capped by |S| (each |etahat_j| <= 1); rounded up.
    """
    out = np.empty(S.shape[0])
    for i, row in enumerate(S):
        B = Vt[row > 0]
        if norm == "linf":
            g = np.sqrt((B * B).sum(axis=0)) + 1e-300
            G = (B / g) @ B.T
            lam = float(np.linalg.eigvalsh(G)[-1]) + 64.0 * _U * (B.shape[1] + 10) * float(np.trace(G))
            val = lam * float(g.sum()) * (1.0 + 1e-9)
        else:
            G = B @ B.T
            val = (float(np.linalg.eigvalsh(G)[-1]) + 64.0 * _U * (B.shape[1] + 10) * float(np.trace(G))) * (1.0 + 1e-9)
        out[i] = min(val + 1e-12, float(B.shape[0]))
    return out


def _build(n: int, d: int, norm: str, K: int, mono: int, second: bool, upper_cone: bool):
    key = ("factored", n, d, norm, K, mono, second, upper_cone)
    if key in _CACHE:
        return _CACHE[key]
    m = n - 1
    tau = cp.Variable(name="tau")
    mu = cp.Variable(m, name="mu")
    bt = cp.Variable(m, name="bt")
    eta = cp.Variable(m, name="eta")
    lam = cp.Variable(n, name="lam")
    U = cp.Variable((n, 3), name="U")  # unit coordinates sigma, omega, beta
    V = cp.Variable((n, 3), name="V")
    SU = cp.Variable(n, name="SU")
    SV = cp.Variable(n, name="SV")
    W = cp.Variable(d, name="W")
    P: dict = {}
    for name in _WEIGHT_PARAMS:
        P[name] = cp.Parameter(n, nonneg=name != "c_lam", name=name)
    P["c_tau"], P["n_tau"] = cp.Parameter(name="c_tau"), cp.Parameter(nonneg=True, name="n_tau")  # filled, unused
    for name in ("c_base", "n_base"):
        P[name] = cp.Parameter(n, nonneg=name == "n_base", name=name)
    for name in ("ks", "kbb", "ib"):
        P[name] = cp.Parameter(n, nonneg=True, name=name)
    for name in ("kb", "hb"):
        P[name] = cp.Parameter(m, nonneg=True, name=name)
    P["Pe"] = cp.Parameter((m, d), name="Pe")
    P["Pq"] = cp.Parameter((2, d), name="Pq")
    tau_m = tau * np.ones(m)
    base = cp.hstack([bt, cp.reshape(tau, (1,), order="F")])
    cons = [bt == tau_m + cp.multiply(P["kb"], mu), mu >= 0, mu <= tau_m, eta == P["Pe"] @ W,
            cp.constraints.ExpCone(cp.multiply(P["hb"], eta) + cp.multiply(P["hb"], tau_m), tau_m, bt),
            2.0 * mu <= eta + tau_m]
    variables = dict(tau=tau, mu=mu, bt=bt, eta=eta)
    if second:  # tau-scaled second moments Q_j = tau etahat_j^2 of the query factor, with a shared budget
        Q = cp.Variable(m, name="Q")
        variables["Q"] = Q
        k = budget_subsets(m).shape[0]
        P["Lb"] = cp.Parameter(k, nonneg=True, name="Lb")
        P["Sb"] = cp.Parameter((k, m), nonneg=True, name="Sb")
        for name in ("qa", "qb", "qc"):
            P[name] = cp.Parameter((m, QUAD_POINTS), name=name)
        cons += [cp.SOC(Q + tau_m, cp.vstack([Q - tau_m, 2.0 * eta]), axis=0), Q <= tau_m,
                 P["Sb"] @ Q <= P["Lb"] * tau]
        for c in range(QUAD_POINTS):
            cons.append(mu <= cp.multiply(P["qa"][:, c], tau_m) + cp.multiply(P["qb"][:, c], eta)
                        + cp.multiply(P["qc"][:, c], Q))
    cons += [SU == cp.multiply(P["ks"], U[:, 0]) + cp.multiply(P["kbb"], U[:, 2]),
             SV == cp.multiply(P["ks"], V[:, 0]) + cp.multiply(P["kbb"], V[:, 2])]
    ahat = base + cp.multiply(P["kt"], lam)
    cons += [P["n_base"] @ base + P["n_lam"] @ lam == 1,
             lam <= cp.multiply(P["sec_tau"], base) + cp.multiply(P["sec_U"], SU) + cp.multiply(P["sec_V"], SV),
             lam >= 0, lam <= base,
             cp.constraints.ExpCone(cp.multiply(P["hU"], SU) + cp.multiply(P["hV"], SV) + cp.multiply(P["hV"], base),
                                    base, ahat)]
    if upper_cone:  # (C5) base >= a e^{-s}, per unit of E_l (as in `relaxation.weight_constraints`)
        cons.append(cp.constraints.ExpCone(-cp.multiply(P["up_tau"], base) - cp.multiply(P["up_lam"], lam)
                                           - cp.multiply(P["up_V"], SV) - cp.multiply(P["up_U"], SU), ahat, base))
    if mono:
        for name in ("mV", "mU", "mlam", "mtau"):
            P[name] = cp.Parameter((n, mono), name=name)
        for c in range(mono):
            cons.append(cp.multiply(P["mV"][:, c], SV) + cp.multiply(P["mU"][:, c], SU)
                        + cp.multiply(P["mlam"][:, c], lam) + cp.multiply(P["mtau"][:, c], base) >= 0)
    mU = cp.multiply(P["ib"], lam)
    mV = cp.multiply(P["ib"], base) - cp.multiply(P["ib"], lam)
    cons += [U[:, 2] <= mU, -U[:, 2] <= mU, V[:, 2] <= mV, -V[:, 2] <= mV]
    Yq = P["Pq"] @ W
    cons += [U[m, 0] + V[m, 0] == Yq[0], U[m, 1] + V[m, 1] == Yq[1]]
    if norm == "l2":
        cons.append(cp.SOC(tau, W))
        for name in ("G", "Gq"):
            P[name] = cp.Parameter((2, 2), name=name)
        P["cs"], P["csq"] = cp.Parameter(nonneg=True, name="cs"), cp.Parameter(nonneg=True, name="csq")
        cons += [cp.SOC(P["cs"] * lam[:m], P["G"] @ U[:m, :2].T, axis=0),
                 cp.SOC(P["cs"] * bt - P["cs"] * lam[:m], P["G"] @ V[:m, :2].T, axis=0),
                 cp.SOC(P["csq"] * lam[m], P["Gq"] @ U[m, :2]),
                 cp.SOC(P["csq"] * tau - P["csq"] * lam[m], P["Gq"] @ V[m, :2])]
    else:
        cons += [W <= tau, -W <= tau]
        cons += polygon_constraints(P, n, K, U, V, lam, base)
    objective = cp.Maximize(P["c_base"] @ base + P["c_lam"] @ lam + P["c_V"] @ V[:, 1] + P["c_U"] @ U[:, 1])
    variables.update(lam=lam, U=U, V=V, SU=SU, SV=SV, W=W)
    entry = (cp.Problem(objective, cons), P, variables)
    _CACHE[key] = entry
    return entry


def widths(D: VaryingData) -> tuple[np.ndarray, np.ndarray]:
    """(Hf, hk): per-token half-width of the query factor (0 for the query token) and of the key factor."""
    Hf = D.scales[:, 2] * D.active[:, 2]
    Hf = Hf.copy()
    Hf[-1] = 0.0
    hk = (D.scales[:, 0] * D.active[:, 0] + D.scales[:, 3] * D.active[:, 3]) * (1.0 + 4.0 * _U)
    return Hf, hk


def _set_parameters(P: dict, D: VaryingData):
    m = D.n - 1
    Hf, hk = widths(D)
    El, Ehat, _, _ = weight_parameters(P, D.A - Hf, hk, D.eps, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w)
    wt = (D.w0 + D.eps_w - D.g0) / D.rho_o
    wt = wt + 4.0 * _U * (np.abs(D.w0) + D.eps_w + abs(D.g0)) / D.rho_o + 4.0 * _U * np.abs(wt)
    P["c_base"].value = El * wt + 4.0 * _U * El * np.abs(wt) + 1e-300
    P["n_base"].value = El
    kb = np.expm1(2.0 * Hf)
    P["kb"].value, P["hb"].value = kb[:m], Hf[:m]
    act = D.active
    P["ks"].value = D.scales[:, 0] * act[:, 0] / hk
    P["kbb"].value = D.scales[:, 3] * act[:, 3] / hk
    P["ib"].value = act[:, 3] * (1.0 + 4.0 * _U)
    P["Pe"].value, P["Pq"].value = D.Vt[:m], D.Vt[m:]
    if "Lb" in P:
        P["Sb"].value = budget_subsets(m, np.argsort(-D.A[:m], kind="stable"))
        P["Lb"].value = query_budget(D.Vt[:m], D.norm, P["Sb"].value)
        P["qa"].value, P["qb"].value, P["qc"].value = quadratic_rows(Hf[:m])
    if "G" in P:
        P["G"].value, P["cs"].value = ellipse_matrix(D.u_s, D.u_w, D.radius, D.scales[0, 0], D.rho_w)
        P["Gq"].value, P["csq"].value = ellipse_matrix(D.u_q, D.u_w, D.radius, D.scales[-1, 0], D.rho_w)
    tau_lo, tau_hi = softmax_bounds(El, El * Ehat * np.exp(2.0 * Hf))
    return tau_lo, tau_hi, Hf


def _box(V: dict, D: VaryingData, tau_lo: float, tau_hi: float, Hf: np.ndarray) -> dict:
    """A box containing every lifted true point (the certification box of `dual_certificate`)."""
    n, m, inflate = D.n, D.n - 1, 1.0 + 1e-9
    bt_hi = tau_hi * np.exp(2.0 * Hf[:m]) * (1.0 + 1e-12) * inflate
    base_hi = np.concatenate([bt_hi, [tau_hi * inflate]])
    unit = np.where(D.active[:, [0, 1, 3]] > 0, 1.0, 0.0) * inflate
    t = tau_hi * inflate
    extra = {V["Q"]: (np.zeros(m), np.full(m, t))} if "Q" in V else {}
    return extra | {V["tau"]: (tau_lo, tau_hi), V["mu"]: (np.zeros(m), np.full(m, t)),
            V["bt"]: (np.full(m, tau_lo * (1.0 - 1e-9)), bt_hi), V["eta"]: (np.full(m, -t), np.full(m, t)),
            V["lam"]: (np.zeros(n), base_hi), V["U"]: (-unit * base_hi[:, None], unit * base_hi[:, None]),
            V["V"]: (-unit * base_hi[:, None], unit * base_hi[:, None]), V["SU"]: (-base_hi, base_hi),
            V["SV"]: (-base_hi, base_hi), V["W"]: (np.full(D.d, -t), np.full(D.d, t))}


def second_order_varying_factored(problem: HeadProblem, monotone_points: int = MONOTONE_POINTS,
                                  ladder=None, center: bool = True, second: bool = True,
                                  upper_cone: bool = False) -> SecondOrderResult:
    """Sound upper bound on max g for a varying query with factored weights (see the module docstring).

    ladder: the solver attempts of both programs; None: FACTORED_LADDER for the factored program, SOLVER_LADDER
    for the unfactored one (tiny widths, or when every factored attempt fails)."""
    if problem.mode != "varying":
        raise ValueError("second_order_varying_factored expects mode='varying'")
    t0 = time.perf_counter()
    fo = fallback_bound(problem)
    D = VaryingData(problem, fo, center)
    why = "degenerate score intervals" if not np.all(D.h > 1e-9) else representable(D.A, D.h, D.eps, width_only=True)
    if not why:
        D = D.drop_negligible()
        why = representable(D.A, D.h, D.eps)
    if why:
        return settle(math.inf, fo, t0, "varying", no_solve_reason=why)
    Hf, hk = widths(D)
    if D.n < 2 or float(np.min(Hf[:-1])) < DEVIATION_BELOW or float(np.min(hk)) < DEVIATION_BELOW:
        return _unfactored(problem, upper_cone, monotone_points, ladder or SOLVER_LADDER, center, "tiny width", t0)
    res = _solve(problem, D, monotone_points, ladder or FACTORED_LADDER, second, upper_cone, fo, t0)
    if res.fallback:  # the factored solve failed: the unfactored program is another sound attempt
        return _unfactored(problem, upper_cone, monotone_points, ladder or SOLVER_LADDER, center,
                           f"factored {res.status}", t0)
    return res


def _unfactored(problem, upper_cone, monotone_points, ladder, center, why, t0) -> SecondOrderResult:
    """The unfactored program of `varying` (sound; its own fallback is the labelled first-order bound)."""
    res = second_order_varying(problem, upper_cone=upper_cone, monotone_points=monotone_points, ladder=ladder,
                               center=center)
    res.status = f"{res.status} (unfactored: {why})"
    res.seconds = time.perf_counter() - t0
    return res


def _solve(problem, D, monotone_points, ladder, second, upper_cone, fo, t0) -> SecondOrderResult:
    n = D.n
    prob, P, V = _build(n, D.d, problem.norm, SLOTS, monotone_points, second, upper_cone)
    tau_lo, tau_hi, Hf = _set_parameters(P, D)
    box = _box(V, D, tau_lo, tau_hi, Hf)
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
    out = cutting_plane_solve(prob, P, V, box, chains, edges, SLOTS, D.scales[:, :2], lambda b: _to_g(b, D),
                              ladder, base_of=lambda v: np.concatenate([np.asarray(v["bt"]).ravel(), [float(v["tau"])]]),
                              cut_stop=VARYING_CUT_STOP)
    best, status, solver, primal, rounds, n_facets, log, gap = out
    return settle(best, fo, t0, "varying", status=status, solver=solver, primal=primal, rounds=rounds,
                  n_facets=n_facets, log=log, dual_gap=gap)


def second_order_varying_variant(problem: HeadProblem, name: str) -> SecondOrderResult:
    """Benchmark variants of the varying query.

    'shift' / 'oldtight': the unfactored program of `varying`, centered / with the upper cone (C5);
    'factor' / 'factor0': factored, centered / not centered, no second moments; 'moment': factored, centered,
    second moments; 'tight' / 'tight0': factored, centered, upper cone (C5) at the key level, with / without
    second moments.
    """
    if name == "shift":
        return second_order_varying(problem, center=True)
    if name in ("factor", "factor0"):
        return second_order_varying_factored(problem, center=name == "factor", second=False)
    if name == "moment":
        return second_order_varying_factored(problem)
    if name == "tight":
        return second_order_varying_factored(problem, upper_cone=True)
    if name == "tight0":
        return second_order_varying_factored(problem, upper_cone=True, second=False)
    if name == "oldtight":
        return second_order_varying(problem, upper_cone=True)
    raise ValueError(f"unknown variant {name!r}")
