"""The level-1 exponential-cone moment relaxation of one head: its variables, constraints and objective.

Shared by the fixed query (`monolithic`) and the varying query (`unfactored`); the zonotope facets and the
cutting-plane loop are in `facets`, the weak-duality certification in `weak_duality`. Derivation and
the secant-slack analysis: docs/certificate.md.

Setting (`HeadProblem`, mode "fixed"). Token j has score s_j = A_j + sigma_j + e_j and value
w_j = w0_j + omega_j + f_j, where A_j = s0_j - shift, x_j = (sigma_j, omega_j) = (u_s.delta_j, u_w.delta_j)
lies in P = the 2-D image of the radius-r ball, and |e_j| <= eps_j, f_j <= epsw_j bound the floating-point
error of the computed data (`head.reduced_geometry`). h_j = R_s = max |sigma| over P (the varying query has its own
per-token half-width h_j of the total score shift).

Units. Every coordinate is measured in units of its own range: the score shift by h_j (the "unit score"
shat = sigma / h_j in [-1, 1]), the value shift by rho_w = R_w, and the objective (g - g0) by rho_o. One
common factor for both coordinates (rho = R_s + R_w) would make the facet normals nearly parallel to an
axis when R_s << R_w, so that a 1e-10 feasibility error moves the value coordinate by ~1e-6 R_w: the whole
second-order gap.

Lifting. With tau = 1 / sum_k e^{s_k} and a_j = tau e^{s_j} (so sum_j a_j = 1, g = sum_j a_j w_j), every
weight lies between E_lj tau and E_uj tau, E_lj = e^{A_j - h_j - eps_j}, E_uj = E_lj Ehat_j,
Ehat_j = e^{2 h_j + 2 eps_j}, kappa_j = Ehat_j - 1. Write a_j = E_lj (tau + kappa_j lam_j) with
lam_j in [0, tau] and split the tau- and a-scaled moments of the unit coordinates xhat_j along the two
weight bounds:

    U_j = lam_j xhat_j  in lam_j Phat,    V_j = (tau - lam_j) xhat_j  in (tau - lam_j) Phat,
    S_j = tau xhat_j = U_j + V_j,         M_j = a_j xhat_j = E_lj (V_j + Ehat_j U_j).

U_j in lam_j Phat and V_j in (tau - lam_j) Phat are exactly the localizing couplings of the calibration
note (products of the weight bounds with the facets of P). Every variable is O(tau).

Relaxation (level-1 moments, K_exp = cl{(x, y, z): y e^{x/y} <= z}), ahat_j = tau + kappa_j lam_j, Ss_j / Us_j
/ Vs_j = unit score coordinate of S_j / U_j / V_j:

    maximize    sum_j E_lj ( ahat_j wt_j + rho_w (V_j,omega + Ehat_j U_j,omega) ) / rho_o,   wt_j = w0_j + epsw_j - g0
    subject to  sum_j E_lj ahat_j = 1                                               (C0: sum a = 1)
                (h_j (Ss_j + tau), tau, ahat_j) in K_exp                            (C1: a >= tau e^{s})
                lam_j <= (e^{2 eps} - 1) / kappa_j tau + e^{2 eps} (Ss_j + tau) / 2   (C2: secant, / kappa)
                0 <= lam_j <= tau,  U_j in lam_j Phat,  V_j in (tau - lam_j) Phat    (C3: couplings)
                E_tau[(e - E_c)(s - c)] >= -margin  at MONOTONE_POINTS interior unit scores c   (C4, / kappa)
                [tight variant] (-(h + 2 eps) ahat_j - h (Vs_j + Ehat_j Us_j), ahat_j, tau) in K_exp  (C5)

Deviation form (h_j < DEVIATION_BELOW). At a tiny half-width the curvature of the exponential (~h^2) is
below what an interior-point solve resolves in (C1) (~1e-10 / h^2 relative). There (C1) is replaced by
the deviation variable nu_j = (kappa_j lam_j - h_j y_j) / h_j^2, y_j = Ss_j + tau, with the rotated cone
2 nu_j tau >= y_j^2 (e^x >= 1 + x + x^2/2 for x = h (shat + 1) >= 0): a valid, well-scaled constraint
that misses only the cubic term (relative O(h) of the curvature).

Monotonicity cuts. exp is increasing, so (e - E_c)(s - c) >= 0 pointwise for every score point c with
E_c = e^{A + c}; its tau-scaled expectation is linear in the level-1 moments. At c = the a-weighted mean
score it gives "a-mean score >= tau-mean score", hence a <= tau sec(a-mean): the weight is at most the
secant at the score where its value is read (docs/certificate.md, section 7). The data error of the
score costs a margin tau E_c (e^{eps} - 1) 2 h.

Variants. The default ("paper" relaxation) is (C0)-(C4): gap second order and within the secant-slack
bound on every unit measured. The tight variant (upper_cone=True) adds (C5): 10-40x smaller gaps.

Every row of the program has one Parameter (or a constant) per variable, so the canonical conic data are
the parameter values themselves (computed with expm1 and without cancellation) and the data-rounding
assumption of `weak_duality` (relative 1e-12 per entry) holds entrywise. Every lifted true
perturbation is feasible (checked numerically in tests/certify/second_order), so the optimum is >= max g.
The certificate is g0 + rho_o x the weak-duality bound of `weak_duality` over a box containing every
lifted true point; the solver's primal objective is never used as the answer.

Representability (`representable`, `head.negligible_tokens`). Tokens whose weight share is below e^-60 under
every perturbation are dropped and their effect bounded (`negligible_tokens`); a weight band e^{2h} above
e^{2 MAX_HALF_WIDTH}, or a lower weight bound that underflows, is a labelled fallback (the first-order
certificate capped by max_j W_j, `fallback_bound`) -- never an exception, never a weight forced to 0.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.dual_bound.compiled import assign
from attncert.head.problem import HeadProblem
from attncert.head.reduced_geometry import ReducedGeometry
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

MONOTONE_POINTS = 7  # interior score points of the monotonicity cuts per token
FO_TIE = 1e-9  # a second-order bound this close above the first-order one is a tie, not a failure ...
TIE_DUAL = 1e-7  # ... or within twice its dual gap when that gap is below this (relative to 1 + |fo|)
DEVIATION_BELOW = 1e-3  # half-widths h below this use the deviation form of the exponential lower bound
MAX_HALF_WIDTH = 18.0  # e^{2h} beyond ~4e15: the weight band exceeds double precision (see `representable`)
_U = UNIT_ROUNDOFF


@dataclass
class SecondOrderResult:
    """Sound bound from the second-order relaxation (or its first-order fallback)."""

    value: float  # sound upper bound on max g (sense "max") or lower bound on min g (sense "min")
    status: str  # solver status of the certifying solve, or the reason for a fallback / shortcut
    solver: str  # "CLARABEL", "SCS", "first_order" (fallback), "first_order_static" (no score motion) or
    #             "first_order_attained" (a feasible value attains the first-order bound: `attained`)
    seconds: float
    fallback: bool  # True when the value is the first-order certificate because the relaxation failed
    sense: str = "max"
    mode: str = "fixed"
    primal: float = math.nan  # solver's primal objective in g units: a diagnostic, not a certificate
    rounds: int = 0  # cutting-plane rounds (linf) / solves
    n_facets: int = 0  # facets of P used in the last round (linf)
    log: list = field(default_factory=list)  # (solver, status, bound in g units, seconds) per solve
    dual_gap: float = math.nan  # certified bound - solver primal of the certifying solve (g units, >= ~0)
    resume: object = field(default=None, repr=False, compare=False)  # the long varying path's end state
    #   (`varying_query.long_start.LongStart`), which the same unit's tight solve starts from; None elsewhere


def softmax_bounds(E_lo: np.ndarray, E_hi: np.ndarray) -> tuple[float, float]:
    """tau = 1/sum_k e_k for e_k in [E_lo_k, E_hi_k]: returns sound (tau_lo, tau_hi)."""
    return (1.0 / float(E_hi.sum())) * (1.0 - 1e-12), (1.0 / float(E_lo.sum())) * (1.0 + 1e-12)


def representable(A: np.ndarray, h: np.ndarray, eps: np.ndarray, width_only: bool = False) -> str:
    """'' if the weight band of every token fits the program, else the reason (a labelled fallback).

    The program writes each weight as E_l (tau + kappa lam) with E_l = e^{A - h - eps} and
    kappa = e^{2h + 2eps} - 1: it needs a finite, solvable band e^{2h} (beyond ~e^{36} no double-precision
    interior-point solve resolves both ends; e^{2h} overflows at h ~ 355) and E_l > 0 (a token whose lower
    weight bound underflows would be forced to weight 0, which is unsound when its upper bound is not
    negligible; negligible tokens are dropped first, `head.negligible_tokens`). width_only: check the band only.
    """
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(h)) and np.all(np.isfinite(eps))):
        return "non-finite score data"
    hm = float(np.max(h + eps))
    if hm > MAX_HALF_WIDTH:
        return f"score half-width {hm:.3g} > {MAX_HALF_WIDTH:g}: weight band e^(2h) beyond double precision"
    if not width_only and float(np.min(A - h - eps)) < -700.0:
        return "a lower weight bound e^(A - h) underflows"
    return ""


def weight_constraints(P: dict, n: int, tau, lam, Us, Vs, upper_cone: bool, mono: int, nu=None) -> list:
    """Constraints tying each weight to its score (shared by the fixed and the varying query).

    lam: the upper-level mass; Us, Vs: the unit score coordinates of U and V (score shift / h_j per unit of
    mass). nu: (n,) variable of the deviation form (or None). Creates its
    Parameters in P; `weight_parameters` fills them. Every row has one Parameter (or constant) per
    variable, so the canonical data are the parameter values themselves (no cancellation inside cvxpy).
    """
    for name, nonneg in (("c_lam", False), ("c_V", True), ("c_U", True), ("n_lam", True), ("kt", True),
                         ("hV", True), ("hU", True), ("up_tau", True), ("up_lam", True),
                         ("up_V", True), ("up_U", True), ("sec_tau", True), ("sec_U", True), ("sec_V", True)):
        P[name] = cp.Parameter(n, nonneg=nonneg, name=name)
    P["c_tau"] = cp.Parameter(name="c_tau")
    P["n_tau"] = cp.Parameter(nonneg=True, name="n_tau")
    tau_n = tau * np.ones(n)
    ahat = tau_n + cp.multiply(P["kt"], lam)  # a / E_l = tau + kappa lam
    cons = [
        P["n_tau"] * tau + P["n_lam"] @ lam == 1,
        # (C2) secant, divided by kappa: lam <= sec_tau tau + sec_S S
        lam <= cp.multiply(P["sec_tau"], tau_n) + cp.multiply(P["sec_U"], Us) + cp.multiply(P["sec_V"], Vs),
        lam >= 0,
        lam <= tau_n,
    ]
    if nu is None:
        # (C1) a >= tau e^{s}: (h (S + tau), tau, ahat) in K_exp, S the unit score moment
        cons.append(cp.constraints.ExpCone(cp.multiply(P["hU"], Us) + cp.multiply(P["hV"], Vs)
                                           + cp.multiply(P["hV"], tau_n), tau_n, ahat))
    if upper_cone:  # (C5) tau >= a e^{-s}: (-(h + 2 eps) ahat - h Mhat, ahat, tau) in K_exp
        cons.append(cp.constraints.ExpCone(-cp.multiply(P["up_tau"], tau_n) - cp.multiply(P["up_lam"], lam)
                                           - cp.multiply(P["up_V"], Vs) - cp.multiply(P["up_U"], Us), ahat, tau_n))
    if mono:  # (C4) monotonicity cuts, divided by kappa
        for name in ("mV", "mU", "mlam", "mtau"):
            P[name] = cp.Parameter((n, mono), name=name)
        for c in range(mono):
            cons.append(cp.multiply(P["mV"][:, c], Vs) + cp.multiply(P["mU"][:, c], Us)
                        + cp.multiply(P["mlam"][:, c], lam) + cp.multiply(P["mtau"][:, c], tau_n) >= 0)
    if nu is not None:  # deviation form: kappa lam = h y + h^2 nu (y = S + tau) and nu >= y^2 / (2 tau)
        P["dv_lam"] = cp.Parameter(n, nonneg=True, name="dv_lam")
        P["dv_nu"] = cp.Parameter(n, nonneg=True, name="dv_nu")
        y = Us + Vs + tau_n
        cons += [cp.multiply(P["dv_lam"], lam) - y - cp.multiply(P["dv_nu"], nu) == 0,
                 cp.SOC(nu + tau_n, cp.vstack([nu - tau_n, math.sqrt(2.0) * y]), axis=0)]
    return cons


def _up(x, k: float = 8.0):
    """x moved up by k ulps of its magnitude (for coefficients whose increase loosens a row)."""
    return x + k * _U * np.abs(x) + 1e-300


def weight_coefficients(A: np.ndarray, h: np.ndarray, eps: np.ndarray, w0: np.ndarray, eps_w: np.ndarray,
                        g0: float, rho_o: float, rho_w: float, mono: int = MONOTONE_POINTS) -> dict:
    """Every coefficient of the rows of `weight_constraints` and of the objective, as plain arrays.

    Token j's score shift lies in [-h_j, h_j] (h_j > 0, the unit score is shift / h_j) and its computed score
    errs by <= eps_j; values are read in units of rho_w (omega_hat = omega / rho_w); the objective is
    (g - g0) / rho_o. Keys: the Parameter names of `weight_constraints` (mono: (n, mono) arrays of the
    monotonicity cuts; none when mono = 0), plus El, Ehat, kappa, tau_lo, tau_hi.
    """
    n = A.size
    El = np.exp(A - h - eps)
    two = 2.0 * h + 2.0 * eps
    Ehat, kappa = np.exp(two), np.expm1(two)
    wt = (w0 + eps_w - g0) / rho_o
    wt = wt + 4.0 * _U * (np.abs(w0) + eps_w + abs(g0)) / rho_o + 4.0 * _U * np.abs(wt)
    e2m = np.expm1(2.0 * eps)
    half = (1.0 + e2m) / 2.0
    k = dict(El=El, Ehat=Ehat, kappa=kappa, wt=wt,
             c_tau=float(El @ wt) + 4.0 * _U * float(El @ np.abs(wt)) * n,
             c_lam=El * kappa * wt, c_V=El * (rho_w / rho_o), c_U=El * Ehat * (rho_w / rho_o),
             n_tau=float(El.sum()), n_lam=El * kappa, kt=kappa, hV=h, hU=h,
             up_tau=h + 2.0 * eps, up_lam=(h + 2.0 * eps) * kappa, up_V=h, up_U=h * Ehat,
             # secant of exp over [-h, h] in the unit score: kappa lam <= e2m tau + e^{2eps} (kappa / 2) (S + tau)
             sec_U=half, sec_V=half, sec_tau=_up(e2m / kappa + half))
    if mono:
        frac = np.arange(1, mono + 1) / (mono + 1)
        c = 2.0 * frac[None, :] - 1.0  # interior unit score points c in (-1, 1)
        hc, ec = h[:, None], eps[:, None]
        gm1 = np.expm1(hc * (c + 1.0) + ec)  # gamma - 1, gamma = E_c / E_l
        gam = gm1 + 1.0
        umg = gam * np.expm1(hc * (1.0 - c) + ec)  # Ehat - gamma
        kc = kappa[:, None]
        k.update(mV=-gm1 / kc, mU=umg / kc, mlam=np.broadcast_to(-c, (n, mono)).copy(),
                 mtau=_up((c * gm1 + 2.0 * gam * np.expm1(ec)) / kc) + 8.0 * _U * np.abs(c * gm1 / kc))
    k["dv_lam"], k["dv_nu"] = kappa / h, h
    k["tau_lo"], k["tau_hi"] = softmax_bounds(El, El * Ehat)
    return k


def weight_parameters(P: dict, A: np.ndarray, h: np.ndarray, eps: np.ndarray, w0: np.ndarray, eps_w: np.ndarray,
                      g0: float, rho_o: float, rho_w: float):
    """Fill the parameters of `weight_constraints` and the objective from `weight_coefficients`; returns
    (El, Ehat, tau_lo, tau_hi)."""
    k = weight_coefficients(A, h, eps, w0, eps_w, g0, rho_o, rho_w, P["mV"].shape[1] if "mV" in P else 0)
    for name in ("c_tau", "c_lam", "c_V", "c_U", "n_tau", "n_lam", "kt", "hV", "hU", "up_tau", "up_lam",
                 "up_V", "up_U", "sec_U", "sec_V", "sec_tau", "dv_lam", "dv_nu", "mV", "mU", "mlam", "mtau"):
        if name in P:
            assign(P[name], k[name])
    return k["El"], k["Ehat"], k["tau_lo"], k["tau_hi"]


def nu_bound(h: np.ndarray, eps: np.ndarray, tau_hi: float) -> np.ndarray:
    """Upper bound of the deviation variable nu = (kappa lam - h y) / h^2 over the lifted true points.

    nu = tau (e^{h t + delta} - 1 - h t) / h^2 with t in [0, 2], delta in [0, 2 eps] (data error), and
    e^{x} - 1 - x <= x^2 e^{x} / 2, e^{delta} - 1 <= 2.1 eps: nu <= tau e^{2h + 2eps} (2 + 2.1 eps / h^2).
    """
    return tau_hi * np.exp(2.0 * h + 2.0 * eps) * (2.0 + 2.1 * eps / (h * h)) * (1.0 + 1e-9)


def polygon_constraints(P: dict, n: int, K: int, U2, V2, lam, tau_n) -> list:
    """U_j in lam_j P_j and V_j in (tau - lam_j) P_j through K half-plane slots per token (linf).

    Parameters Hs, Hw, b (`facets.fill_facets`).
    """
    import scipy.sparse as sp

    sel = sp.csr_matrix((np.ones(n * K), (np.arange(n * K), np.repeat(np.arange(n), K))), shape=(n * K, n))
    for name in ("Hs", "Hw", "b"):
        P[name] = cp.Parameter(n * K, name=name)
    row = lambda Y: cp.multiply(P["Hs"], sel @ Y[:, 0]) + cp.multiply(P["Hw"], sel @ Y[:, 1])  # noqa: E731
    return [row(U2) <= cp.multiply(P["b"], sel @ lam),
            row(V2) <= cp.multiply(P["b"], sel @ (tau_n - lam))]


def trivial_bound(geo: ReducedGeometry) -> float:
    """max_j (largest value token j can read): g is a convex combination of the values, so g <= this."""
    _, top = geo.value_range()
    val = float(np.max(top + 4.0 * _U * np.abs(top)))
    return math.nextafter(val, math.inf) if math.isfinite(val) else math.inf


def objective(P: dict, tau, lam, U_omega, V_omega):
    return cp.Maximize(P["c_tau"] * tau + P["c_lam"] @ lam + P["c_V"] @ V_omega + P["c_U"] @ U_omega)


def relaxation_problem(P: dict, cons: list, variables: dict, nu=None) -> tuple:
    """(problem, P, variables) of a builder: `objective` over `cons`, with `variables` holding tau, lam, U, V (column
    1: the value coordinate) and whatever else the builder made; nu joins them in the deviation form."""
    if nu is not None:
        variables["nu"] = nu
    v = variables
    return cp.Problem(objective(P, v["tau"], v["lam"], v["U"][:, 1], v["V"][:, 1]), cons), P, variables


def ellipse_matrix(u_s: np.ndarray, u_w: np.ndarray, radius: float, scale_s: float,
                   scale_w: float) -> tuple[np.ndarray, float]:
    """(G, cs) with ||G xhat|| <= cs for every xhat = (sigma / scale_s, omega / scale_w), (sigma, omega) in P.

    P is the image of the l2 ball of radius r under [u_s; u_w], so xhat ranges over A B_1 with the unit
    generators A = r [u_s / scale_s; u_w / scale_w] (rows of norm <= 1): {xhat : ||L^{-1} xhat|| <= 1} for
    any L L^T >= A A^T. The Gram matrix of the *unit* generators is regularized by
    tr (1e-12 + 16 gamma_{d+8}) I, which covers its rounding, the rounding of A and of the Cholesky factor
    (Gershgorin: entrywise errors <= gamma_{d+2} |a_i|.|a_j| <= gamma_{d+2}); working in unit generators keeps
    that regularization relative to each coordinate's own range (relative to the trace of the raw Gram, it
    would widen a thin value range R_w << R_s by ~1e-12 (R_s / R_w)^2). cs covers the rounding of G xhat.
    """
    A2 = np.stack([u_s * (radius / scale_s), u_w * (radius / scale_w)])
    Q = np.sum(A2[:, None, :] * A2[None, :, :], axis=2)  # numpy's own summation: BLAS's bits follow its thread count
    tr = float(np.trace(Q))
    d = u_s.shape[0]
    reg = tr * (1e-12 + 16.0 * gamma(d + 8)) + 1e-300
    L = np.linalg.cholesky(Q + reg * np.eye(2))
    G = np.linalg.inv(L)
    cs = 1.0 + 16.0 * _U * math.sqrt(2.0) * float(np.linalg.norm(G)) * (1.0 + 1e-10)
    return G, cs


def fallback_bound(problem: HeadProblem, geo: ReducedGeometry) -> float:
    """The bound returned on fallback: the first-order certificate, capped by the trivial bound max_j W_j.

    Both are sound upper bounds of max g; the smaller one is returned (and a finite one when the
    first-order certificate is not finite at extreme score widths). geo: `reduced_geometry(problem)`.
    """
    from attncert.certify.first_order_certificate import first_order_certificate

    try:
        fo = float(first_order_certificate(problem, geometry=geo))
    except (ValueError, FloatingPointError, OverflowError, ZeroDivisionError):
        fo = math.nan
    tb = trivial_bound(geo)
    finite = [v for v in (fo, tb) if math.isfinite(v)]
    return min(finite) if finite else math.inf


def settle(best: float, fo: float, t0: float, mode: str, *, status: str = "not_run", solver: str = "none",
           primal: float = math.nan, rounds: int = 0, n_facets: int = 0, log: list | None = None,
           no_solve_reason: str = "not_run", dual_gap: float = math.nan) -> SecondOrderResult:
    """The certified bound if it is usable, else the first-order certificate `fo` (labelled fallback).

    The exact relaxation never exceeds the first-order certificate (its weights and values lie in the
    first-order intervals). A certified bound above it by no more than the solve's own accuracy -- FO_TIE,
    or twice the recorded dual gap when that is below TIE_DUAL (both relative to 1 + |fo|) -- is a tie: the
    relaxation equals the first-order bound (e.g. one token carries all the weight, or n = 1), `fo` is
    returned as the second-order value with "first-order bound equal" in the status. A bound further above is
    numerical looseness, and no solve at all is a failure: both return `fo` with fallback=True and the reason
    in `status`.
    """
    log = [] if log is None else log
    scale = 1.0 + abs(fo) if math.isfinite(fo) else 1.0
    tie = FO_TIE * scale
    if math.isfinite(dual_gap) and 0.0 < dual_gap <= TIE_DUAL * scale:
        tie = max(tie, 2.0 * dual_gap)
    if math.isfinite(best) and best <= fo + tie:
        if best > fo:  # equal up to the accuracy of the solve: keep the smaller
            best, status = fo, f"{status}; first-order bound equal"
        return SecondOrderResult(best, status, solver, time.perf_counter() - t0, False, mode=mode, primal=primal,
                                 rounds=rounds, n_facets=n_facets, log=log, dual_gap=dual_gap)
    reason = "second-order bound above first-order" if math.isfinite(best) else (
        log[-1][1] if log else no_solve_reason)
    return SecondOrderResult(fo, f"fallback: {reason}", "first_order", time.perf_counter() - t0, True, mode=mode,
                             primal=primal, rounds=rounds, n_facets=n_facets, log=log, dual_gap=dual_gap)
