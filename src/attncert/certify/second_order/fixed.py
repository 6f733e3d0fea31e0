"""Second-order certificate, fixed query: the level-1 exponential-cone moment relaxation of one head.

Setting (`HeadProblem`, mode "fixed"). Token j has score s_j = A_j + sigma_j + e_j and value
w_j = w0_j + omega_j + f_j, where A_j = s0_j - shift, x_j = (sigma_j, omega_j) = (u_s.delta_j, u_w.delta_j)
lies in P = the 2-D image of the radius-r ball, and |e_j| <= eps_j, f_j <= epsw_j bound the floating-point
error of the computed data (`data_errors`). R_s = max |sigma| over P.

Lifting. With tau = 1 / sum_k e^{s_k} and a_j = tau e^{s_j} (so sum_j a_j = 1, g = sum_j a_j w_j), every
weight lies between E_lj tau and E_uj tau, E_lj = e^{A_j - R_s - eps_j}, E_uj = E_lj Ehat_j,
Ehat_j = e^{2 R_s + 2 eps_j}, kappa_j = Ehat_j - 1. Write a_j = E_lj (tau + kappa_j lam_j) with
lam_j in [0, tau] and split the tau- and a-scaled moments of x_j along the two weight bounds:

    U_j = lam_j x_j  in lam_j P,          V_j = (tau - lam_j) x_j  in (tau - lam_j) P,
    S_j = tau x_j = U_j + V_j,            M_j = a_j x_j = E_lj (V_j + Ehat_j U_j).

U_j in lam_j P and V_j in (tau - lam_j) P are exactly the localizing couplings of the calibration note,
M - E_l S in (a - E_l tau) P and E_u S - M in (E_u tau - a) P (divided by E_u - E_l): products of the
weight bounds with the facets of P. They imply S in tau P and M in a P. This parametrization keeps every
variable O(tau) instead of O(r tau), which is what makes the interior-point solve well conditioned.

Relaxation (level-1 moments, K_exp = cl{(x, y, z): y e^{x/y} <= z}), ahat_j = tau + kappa_j lam_j,
Stot_j = S_j,sigma (the tau-scaled score moment):

    maximize    sum_j E_lj ( ahat_j wt_j + V_j,omega + Ehat_j U_j,omega ),       wt_j = w0_j + epsw_j - g0
    subject to  sum_j E_lj ahat_j = 1                                     (normalization sum a = 1)
                (Stot_j + R_s tau, tau, ahat_j) in K_exp                  (a >= tau e^{s}: exact lower bound)
                kappa_j lam_j <= (e^{2 eps_j} - 1) tau + e^{2 eps_j} c_s (Stot_j + R_s tau)
                                                 (secant of exp over [-R_s, R_s], c_s = (e^{2 R_s} - 1)/(2 R_s))
                0 <= lam_j <= tau,  U_j in lam_j P,  V_j in (tau - lam_j) P      (localizing couplings)
                E_tau[(e - E_c)(s - c)] >= -margin  for c in MONOTONE_POINTS interior points of [-R_s, R_s]
                                                 (monotonicity cuts, linear in the moments, see below)
                [tight variant only] (-(R_s + 2 eps_j) ahat_j - Mhat_j,sigma, ahat_j, tau) in K_exp
                                                 (tau >= a e^{-s}: the exact upper bound in a-scaled moments)

Monotonicity cuts. exp is increasing, so (e - E_c)(s - c) >= 0 pointwise for every score point c with
E_c = e^{A + c}; its tau-scaled expectation M_s - E_c S_s - c a + c E_c tau >= 0 is linear in the level-1
moments (M_s = a-scaled score moment). c = -R_s, R_s give back McCormick products implied by the
couplings; interior points are new. They forbid "crossed" two-level points (the E_u-weighted mass at a
lower score than the E_l-weighted mass), which without them let the relaxation lower a weight below the
exponential at the score where its value is read; on a 2-token head that exceeded the secant-slack bound
by 1.76x (tests/test_secant_slack_bound.py). The data error of the score costs a margin
tau E_c (e^{eps} - 1) 2 R_s.

Variants. The default ("paper" relaxation) is the exponential lower bound, the secant, the couplings and
the monotonicity cuts: its gap is second order (slope ~2.0 in r) and within the secant-slack bound. The
tight variant (upper_cone=True) adds the exact upper exponential bound in a-scaled moments: 10-40x
smaller gaps, but its gap vanishes faster than r^2 at small radii (it is exact on mixtures of feasible
points), so its log-log slope is ~2.8 there instead of 2. Both are sound.

Every lifted true perturbation is feasible (each line is an identity or a valid inequality for it; checked
numerically in tests/test_second_order_certificate.py), so the optimum is >= max g. The certificate is
g0 + the weak-duality bound of `dual_certificate` over a box containing every lifted true point
(tau in [1/sum E_u, 1/sum E_l], lam in [0, tau_hi], U, V in tau_hi * bbox(P)); the solver's primal
objective is never used as the answer. If the solver fails, or if numerical looseness puts the bound above
the first-order certificate (the exact relaxation never is: its weights and values lie in the first-order
intervals), the first-order certificate is returned with fallback=True.

Program size does not depend on the model width d: each token has 5 variables.
* l2: P = {x : ||G x|| <= 1} (G from a regularized Cholesky factor of [u_s; u_w][u_s; u_w]^T, so the
  ellipse may only grow): two 3-dimensional second-order cones per token.
* linf: P is a zonotope with up to 2d facets. Only omega enters the objective, with positive weights, and
  omega appears in no other constraint, so only the *upper* boundary of P (d edges) and the two
  sigma-bounds matter; the lower facets are dropped. Each token gets SLOTS half-plane slots filled with
  a subset of the exact upper facets -- any subset is an outer polygon of P, hence a sound relaxation --
  chosen by cutting planes: edges at GRID_POINTS sigma values and at LOCAL_POINTS values around the token's
  estimated optimum (vertex Dinkelbach), then, after each solve, the edges under every point U_j / lam_j,
  V_j / (tau - lam_j) lying above the exact boundary (at most MAX_ROUNDS solves). Every round's bound is
  sound; the smallest is returned.
The cvxpy problem is built once per (n, norm, slots, variant) with Parameters and reused (DPP).

Coordinates are scaled by rho = R_s + R_w (x' = x / rho) so that the objective is O(1).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.dual_certificate import SOLVER_LADDER, UNIT_ROUNDOFF, gamma, solve_and_certify
from attncert.head.problem import HeadProblem
from attncert.head.projected_ball import Zonotope2D

MAX_ROUNDS = 3  # cutting-plane solves (linf)
SLOTS = 48  # facet slots per token (linf)
GRID_POINTS = 9  # global sigma grid of initial facets
LOCAL_POINTS = 25  # fine grid around each token's estimated optimum ...
WINDOW = 0.3  # ... of half-width WINDOW * R_s
VIOLATION_TOL = 1e-9  # points higher than this (units of rho) above the boundary get a cut
CUT_STOP = 1e-5  # stop when the mass-weighted violation is below CUT_STOP x the (scaled) objective
MONOTONE_POINTS = 7  # interior score points of the monotonicity cuts per token
FO_TIE = 1e-9  # a second-order bound this close above the first-order one is a tie, not a failure


@dataclass
class SecondOrderResult:
    """Sound bound from the second-order relaxation (or its first-order fallback)."""

    value: float  # sound upper bound on max g (sense "max") or lower bound on min g (sense "min")
    status: str  # solver status of the certifying solve, or the reason for a fallback / shortcut
    solver: str  # "CLARABEL", "SCS", "first_order" (fallback) or "first_order_static" (no score motion)
    seconds: float
    fallback: bool  # True when the value is the first-order certificate because the relaxation failed
    sense: str = "max"
    mode: str = "fixed"
    primal: float = math.nan  # solver's primal objective in g units: a diagnostic, not a certificate
    rounds: int = 0  # cutting-plane rounds (linf) / solves
    n_facets: int = 0  # facets of P used in the last round (linf)
    log: list = field(default_factory=list)  # (solver, status, bound in g units, seconds) per solve


# ---------------------------------------------------------------------------------------------
# reduced data
# ---------------------------------------------------------------------------------------------
@dataclass
class FixedQueryData:
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


def data_errors(problem: HeadProblem) -> tuple[np.ndarray, np.ndarray]:
    """Per-token bounds (eps_s, eps_w) on |float64 - exact| of s0_j + u_s.delta and w0_j + u_w.delta.

    Chain (`HeadProblem.fixed_query_directions`): q = z_i W_Q + b_Q, u_s = W_K q / sqrt(d_h),
    s0 = Z0 u_s + b_K.q / sqrt(d_h), u_w = W_V c, w0 = Z0 u_w + b_V.c. A computed dot product of length k
    errs by at most gamma_k times the same product of absolute values; every chain is shorter than
    K = 2d + d_h + 10; moving over the ball adds r gamma_K ||abs-product||_*. Doubled for safety.
    """
    d, dh = problem.d, problem.d_head
    g = 2.0 * gamma(2 * d + dh + 10)
    sq = math.sqrt(dh)
    q_abs = np.abs(problem.Z0[problem.query_index]) @ np.abs(problem.W_Q) + np.abs(problem.b_Q)
    us_abs = np.abs(problem.W_K) @ q_abs / sq
    uw_abs = np.abs(problem.W_V) @ np.abs(problem.c)
    absZ = np.abs(problem.Z0)
    eps_s = g * (absZ @ us_abs + np.abs(problem.b_K) @ q_abs / sq + problem.radius * problem.dual_norm(us_abs))
    eps_w = g * (absZ @ uw_abs + np.abs(problem.b_V) @ np.abs(problem.c) + problem.radius * problem.dual_norm(uw_abs))
    return eps_s, eps_w


def fixed_query_data(problem: HeadProblem) -> FixedQueryData:
    s0, w0, u_s, u_w = problem.fixed_query_directions()
    eps_s, eps_w = data_errors(problem)
    up = 1.0 + gamma(problem.d + 4)
    R_s = problem.radius * problem.dual_norm(u_s) * up
    R_w = problem.radius * problem.dual_norm(u_w) * up
    shift = float(np.max(s0 + eps_s))
    return FixedQueryData(s0 - shift, w0, problem.nominal_value(), eps_s, eps_w, u_s, u_w, R_s, R_w,
                          R_s + R_w, problem.radius, problem.norm)


def softmax_bounds(E_lo: np.ndarray, E_hi: np.ndarray) -> tuple[float, float]:
    """tau = 1/sum_k e_k for e_k in [E_lo_k, E_hi_k]: returns sound (tau_lo, tau_hi)."""
    return (1.0 / float(E_hi.sum())) * (1.0 - 1e-12), (1.0 / float(E_lo.sum())) * (1.0 + 1e-12)


# ---------------------------------------------------------------------------------------------
# facets of the upper boundary of the zonotope (linf)
# ---------------------------------------------------------------------------------------------
class UpperChainFacets:
    """Supporting half-planes n.x <= b of P along its upper boundary, plus the two sigma-bounds.

    Edge k of the upper boundary (`projected_ball.Zonotope2D`) has outward normal (-domega_k, dsigma_k);
    b = h_P(n) = r sum_i |n . (u_s[i], u_w[i])| is evaluated directly (rounded up), so every selected
    half-plane contains the exact image of the ball whatever the rounding of the vertex list.
    """

    def __init__(self, u_s: np.ndarray, u_w: np.ndarray, radius: float, R_s: float):
        """R_s >= r ||u_s||_1, the largest |sigma| over P (rounded up by the caller)."""
        self.chain = Zonotope2D(u_s, u_w, radius)
        self.gens = np.stack([u_s, u_w], axis=0)  # (2, d)
        self.radius = radius
        self.R_s = R_s
        self.d = u_s.shape[0]

    def edge_at(self, sigma: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.chain.sigma, sigma, side="right") - 1
        return np.clip(k, 0, self.d - 1)

    def omega_max(self, sigma: np.ndarray) -> np.ndarray:
        return np.interp(sigma, self.chain.sigma, self.chain.omega)

    def halfplanes(self, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(H, b) for the given edge indices, with the sigma-bounds (+-1, 0) <= R_s prepended."""
        edges = np.unique(np.asarray(edges, dtype=np.int64))
        N = np.stack([-self.chain.domega[edges], self.chain.dsigma[edges]], axis=1)
        nrm = np.hypot(N[:, 0], N[:, 1])
        keep = nrm > 0
        N = N[keep] / nrm[keep, None]
        b = self.radius * np.abs(N @ self.gens).sum(axis=1)
        b = b * (1.0 + gamma(self.d + 6)) + 1e-300
        H = np.concatenate([np.array([[1.0, 0.0], [-1.0, 0.0]]), N])
        b = np.concatenate([[self.R_s, self.R_s], b])
        return H, b


# ---------------------------------------------------------------------------------------------
# the cvxpy program, built once per shape
# ---------------------------------------------------------------------------------------------
_CACHE: dict = {}


def weight_constraints(P: dict, n: int, tau, lam, Utot, Vtot, upper_cone: bool, mono: int) -> list:
    """Constraints tying each weight to its score (shared by the fixed and the varying query).

    Utot, Vtot: (n,) expressions, the scaled score coordinate of U_j and V_j. Creates its Parameters in P;
    `weight_parameters` fills them.
    """
    for name, nonneg in (("c_lam", False), ("c_V", True), ("c_U", True), ("n_lam", True), ("kappa", True),
                         ("h", True), ("up_tau", True), ("up_lam", True), ("rhoEhat", True), ("sec_tau", True),
                         ("sec_S", True)):
        P[name] = cp.Parameter(n, nonneg=nonneg, name=name)
    P["c_tau"] = cp.Parameter(name="c_tau")
    P["n_tau"] = cp.Parameter(nonneg=True, name="n_tau")
    P["rho"] = cp.Parameter(nonneg=True, name="rho")
    tau_n = tau * np.ones(n)
    kl = cp.multiply(P["kappa"], lam)
    ahat = tau_n + kl
    Stot = Utot + Vtot
    cons = [
        P["n_tau"] * tau + P["n_lam"] @ lam == 1,
        cp.constraints.ExpCone(P["rho"] * Stot + cp.multiply(P["h"], tau_n), tau_n, ahat),
        kl <= cp.multiply(P["sec_tau"], tau_n) + cp.multiply(P["sec_S"], Stot),
        lam >= 0,
        lam <= tau_n,
    ]
    if upper_cone:
        cons.append(cp.constraints.ExpCone(-cp.multiply(P["up_tau"], tau_n) - cp.multiply(P["up_lam"], lam)
                                           - P["rho"] * Vtot - cp.multiply(P["rhoEhat"], Utot), ahat, tau_n))
    if mono:
        for name in ("mV", "mU", "mlam", "mtau"):
            P[name] = cp.Parameter((n, mono), name=name)
        for c in range(mono):
            cons.append(cp.multiply(P["mV"][:, c], Vtot) + cp.multiply(P["mU"][:, c], Utot)
                        + cp.multiply(P["mlam"][:, c], lam) + cp.multiply(P["mtau"][:, c], tau_n) >= 0)
    return cons


def weight_parameters(P: dict, A: np.ndarray, h: np.ndarray, eps: np.ndarray, w0: np.ndarray, eps_w: np.ndarray,
                      g0: float, rho: float):
    """Fill the parameters of `weight_constraints` and the objective; returns (El, Ehat, tau_lo, tau_hi).

    Token j's scaled score shift lies in [-h_j, h_j] (h_j > 0) and its computed score errs by <= eps_j.
    """
    El = np.exp(A - h - eps)
    two = 2.0 * h + 2.0 * eps
    Ehat, kappa = np.exp(two), np.expm1(two)
    wt = (w0 + eps_w - g0) / rho
    wt = wt + 4.0 * UNIT_ROUNDOFF * (np.abs(w0) + eps_w + abs(g0)) / rho + 4.0 * UNIT_ROUNDOFF * np.abs(wt)
    c_s = np.expm1(2.0 * h) / (2.0 * h)
    e2 = np.exp(2.0 * eps)
    P["c_tau"].value = float(El @ wt)
    P["c_lam"].value = El * kappa * wt
    P["c_V"].value = El
    P["c_U"].value = El * Ehat
    P["n_tau"].value = float(El.sum())
    P["n_lam"].value = El * kappa
    P["kappa"].value = kappa
    P["rho"].value = rho
    P["h"].value = h
    P["up_tau"].value = h + 2.0 * eps
    P["up_lam"].value = (h + 2.0 * eps) * kappa
    P["rhoEhat"].value = rho * Ehat
    P["sec_tau"].value = np.expm1(2.0 * eps) + e2 * c_s * h
    P["sec_S"].value = e2 * c_s * rho
    if "mV" in P:
        m = P["mV"].shape[1]
        frac = np.arange(1, m + 1) / (m + 1)
        sc = h[:, None] * (2.0 * frac[None, :] - 1.0)  # interior score points sigma_c in (-h, h)
        gam = np.exp(sc + h[:, None] + eps[:, None])  # E_c / E_l
        P["mV"].value = rho * (1.0 - gam)
        P["mU"].value = rho * (Ehat[:, None] - gam)
        P["mlam"].value = -sc * kappa[:, None]
        P["mtau"].value = sc * gam - sc + gam * np.expm1(eps)[:, None] * 2.0 * h[:, None]
    tau_lo, tau_hi = softmax_bounds(El, El * Ehat)
    return El, Ehat, tau_lo, tau_hi


def polygon_constraints(P: dict, n: int, K: int, U2, V2, lam, tau_n) -> list:
    """(U_j) in lam_j P_j and (V_j) in (tau - lam_j) P_j through K half-plane slots per token (linf)."""
    import scipy.sparse as sp

    sel = sp.csr_matrix((np.ones(n * K), (np.arange(n * K), np.repeat(np.arange(n), K))), shape=(n * K, n))
    P["Hs"] = cp.Parameter(n * K, name="Hs")
    P["Hw"] = cp.Parameter(n * K, name="Hw")
    P["b"] = cp.Parameter(n * K, name="b")
    return [cp.multiply(P["Hs"], sel @ Y[:, 0]) + cp.multiply(P["Hw"], sel @ Y[:, 1]) <= cp.multiply(P["b"], sel @ m)
            for Y, m in ((U2, lam), (V2, tau_n - lam))]


def objective(P: dict, tau, lam, U_omega, V_omega):
    return cp.Maximize(P["c_tau"] * tau + P["c_lam"] @ lam + P["c_V"] @ V_omega + P["c_U"] @ U_omega)


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


def _ellipse_matrix(u_s: np.ndarray, u_w: np.ndarray, radius: float, rho: float) -> tuple[np.ndarray, float]:
    """(G, cs) with ||G x'|| <= cs for every x' in P / rho (P = image of the l2 ball)."""
    A2 = np.stack([u_s, u_w])
    Q = A2 @ A2.T
    tr = float(np.trace(Q))
    d = u_s.shape[0]
    reg = tr * (1e-12 + 16.0 * gamma(d + 8)) + 1e-300  # covers Gram and Cholesky rounding: L L^T >= Q
    L = np.linalg.cholesky(Q + reg * np.eye(2))
    G = (rho / radius) * np.linalg.inv(L)
    cs = 1.0 + 8.0 * UNIT_ROUNDOFF * math.sqrt(2.0) * float(np.linalg.norm(G)) * (1.0 + 1e-10)
    return G, cs


def _box(V: dict, n: int, tau_lo: float, tau_hi: float, D: FixedQueryData) -> dict:
    inflate = 1.0 + 1e-9
    sb = tau_hi * D.R_s / D.rho * inflate
    wb = tau_hi * D.R_w / D.rho * inflate
    uv = (np.tile([-sb, -wb], (n, 1)), np.tile([sb, wb], (n, 1)))
    return {V["tau"]: (tau_lo, tau_hi), V["lam"]: (np.zeros(n), np.full(n, tau_hi)), V["U"]: uv, V["V"]: uv}


def _to_g(bound: float, D: FixedQueryData) -> float:
    """g0 + rho * bound, rounded up (plus a tiny term for exp underflow of far-away tokens)."""
    if not math.isfinite(bound):
        return math.inf
    val = D.g0 + D.rho * bound
    val += 4.0 * UNIT_ROUNDOFF * (abs(D.g0) + abs(D.rho * bound)) + 1e-290 * D.A.size * (1.0 + float(np.abs(D.w0).max()))
    return math.nextafter(val, math.inf)


def vertex_dinkelbach(A: np.ndarray, w0: np.ndarray, g0: float, sig: np.ndarray, om: np.ndarray,
                      iters: int = 8) -> tuple[float, np.ndarray]:
    """Estimate of the fixed-query worst case restricted to vertices of the upper boundaries.

    sig, om: (n, d+1) vertex coordinates of each token's boundary. Returns (t, k), k_j the best vertex of
    token j at t (Dinkelbach's iteration). Only used to place facets: a feasible value, not a bound.
    """
    E = np.exp(A[:, None] + sig - sig.max())
    t = g0
    rows = np.arange(A.size)
    k = np.argmax(E * (w0[:, None] - t + om), axis=1)
    for _ in range(iters):
        k = np.argmax(E * (w0[:, None] - t + om), axis=1)
        e = E[rows, k]
        t_new = float(e @ (w0 + om[rows, k]) / e.sum())
        if not t_new > t:
            break
        t = t_new
    return t, k


def initial_edges(chains: list, k: np.ndarray) -> list:
    """Per token: edges at a global sigma grid and at a fine grid around the token's estimated optimum."""
    out = []
    for j, ch in enumerate(chains):
        R = ch.R_s
        glob = ch.edge_at(np.linspace(-R, R, GRID_POINTS))
        s_j = ch.chain.sigma[k[j]]
        loc = np.clip(np.linspace(s_j - WINDOW * R, s_j + WINDOW * R, LOCAL_POINTS), -R, R)
        out.append(np.unique(np.concatenate([glob, ch.edge_at(loc), np.clip([k[j] - 1, k[j]], 0, ch.d - 1)])))
    return out


def fill_facets(P: dict, chains: list, edges: list, K: int, rho: float):
    """Write the selected half-planes of every token into its K slots (padding rows: 0 <= b lam)."""
    n = len(chains)
    Hs, Hw, bb = np.zeros(n * K), np.zeros(n * K), np.ones(n * K)
    for j, ch in enumerate(chains):
        H, b = ch.halfplanes(edges[j])
        m = min(H.shape[0], K)
        Hs[j * K:j * K + m], Hw[j * K:j * K + m] = H[:m, 0], H[:m, 1]
        bb[j * K:j * K + m] = b[:m] / rho * (1.0 + 4.0 * UNIT_ROUNDOFF)
    P["Hs"].value, P["Hw"].value, P["b"].value = Hs, Hw, bb


def cuts(tau: float, lam: np.ndarray, U: np.ndarray, V: np.ndarray, chains: list, rho: float,
         El: np.ndarray, Ehat: np.ndarray):
    """Per token: the edges under its points U/lam and V/(tau-lam) lying above the exact boundary.

    U, V: (n, >= 2) scaled moments (first two coordinates: sigma, omega). Also returns the mass-weighted
    total height of those points above the boundary (objective units): what more cuts can still remove.
    """
    n = lam.size
    new = [np.zeros(0, dtype=np.int64) for _ in range(n)]
    total = 0.0
    for Y, mass, weight in ((U, lam, El * Ehat), (V, tau - lam, El)):
        for j in range(n):
            if not mass[j] > 1e-12 * tau:
                continue
            ch = chains[j]
            x = np.asarray(Y[j, :2]) / mass[j] * rho
            sig = float(np.clip(x[0], -ch.R_s, ch.R_s))
            h = x[1] - float(ch.omega_max(np.array([sig]))[0])
            if h > VIOLATION_TOL * rho:
                new[j] = np.union1d(new[j], ch.edge_at(np.array([sig])))
                total += weight[j] * mass[j] * h / rho
    return new, total


def cutting_plane_solve(prob: cp.Problem, P: dict, V: dict, box: dict, chains: list, edges: list, K: int,
                        rho: float, El: np.ndarray, Ehat: np.ndarray, to_g):
    """Solve, certify, add cuts, repeat (linf). Every round's certified bound is sound; keep the best.

    Returns (best value in g units, its status, its solver, last primal in g units, rounds, facets, log).
    """
    n = len(chains)
    log, best, best_status, best_solver, primal, converged, rounds = [], math.inf, "not_run", "none", math.nan, False, 0
    for rounds in range(1, MAX_ROUNDS + 1):
        fill_facets(P, chains, edges, K, rho)
        ladder = SOLVER_LADDER if not converged else [a for a in SOLVER_LADDER if a[0] == "CLARABEL"]
        cert = solve_and_certify(prob, box, ladder=ladder)
        log += [(sv, st, to_g(bd), sec) for (sv, st, bd, sec) in cert.log]
        val = to_g(cert.bound)
        if val < best and (cert.converged or converged):  # a failed later round may still improve it
            best, best_status, best_solver = val, cert.status, cert.solver
        if not cert.converged:
            break
        converged = True
        primal = to_g(cert.primal)
        vals = {k: cert.values[v.id] for k, v in V.items()}
        new, excess = cuts(float(vals["tau"]), np.asarray(vals["lam"]), np.asarray(vals["U"]),
                           np.asarray(vals["V"]), chains, rho, El, Ehat)
        if excess <= CUT_STOP * max(cert.primal, 1e-300):
            break
        grew = False
        for j in range(n):
            add = np.setdiff1d(new[j], edges[j])
            room = K - 2 - edges[j].size
            if add.size and room > 0:
                edges[j] = np.union1d(edges[j], add[:room])
                grew = True
        if not grew:
            break
    n_facets = int(max(e.size for e in edges)) + 2
    return best, best_status, best_solver, primal, rounds, n_facets, log


def _set_parameters(P: dict, D: FixedQueryData):
    n = D.A.size
    return weight_parameters(P, D.A, np.full(n, D.R_s), D.eps_s, D.w0, D.eps_w, D.g0, D.rho)


def _solve_linf(problem: HeadProblem, D: FixedQueryData, upper_cone: bool, mono: int):
    n = problem.n
    chain = UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s)
    chains = [chain] * n
    _, k = vertex_dinkelbach(D.A, D.w0, D.g0, np.tile(chain.chain.sigma, (n, 1)), np.tile(chain.chain.omega, (n, 1)))
    edges = initial_edges(chains, k)
    prob, P, V = _build(n, "linf", SLOTS, upper_cone, mono)
    El, Ehat, tau_lo, tau_hi = _set_parameters(P, D)
    box = _box(V, n, tau_lo, tau_hi, D)
    return cutting_plane_solve(prob, P, V, box, chains, edges, SLOTS, D.rho, El, Ehat, lambda b: _to_g(b, D))


def second_order_certificate(problem: HeadProblem, sense: str = "max", upper_cone: bool = False,
                             monotone_points: int = MONOTONE_POINTS) -> SecondOrderResult:
    """Sound bound from the second-order (exponential-cone moment) relaxation.

    sense "max": upper bound on max g; "min": lower bound on min g (= -bound for the negated spec).
    Fixed query here; a varying query is delegated to `second_order_varying`.
    """
    if sense == "min":
        r = second_order_certificate(problem.negated(), "max", upper_cone, monotone_points)
        r.value = -r.value
        r.primal = -r.primal
        r.sense = "min"
        r.log = [(s, st, -b, t) for (s, st, b, t) in r.log]
        return r
    if sense != "max":
        raise ValueError(f"sense must be 'max' or 'min'; got {sense!r}")
    if problem.mode == "varying":
        from attncert.certify.second_order.varying import second_order_varying

        return second_order_varying(problem, upper_cone=upper_cone, monotone_points=monotone_points)
    t0 = time.perf_counter()
    D = fixed_query_data(problem)
    n = problem.n
    if not D.R_s > 1e-9 * max(1.0, D.R_w):  # scores (almost) do not move: nothing second order to gain
        from attncert.certify.first_order_certificate import first_order_certificate

        v = first_order_certificate(problem)
        return SecondOrderResult(v, "static_scores", "first_order_static", time.perf_counter() - t0, False)

    log, best, best_status, best_solver, primal = [], math.inf, "not_run", "none", math.nan
    rounds, n_facets = 0, 0
    if problem.norm == "l2":
        prob, P, V = _build(n, "l2", 0, upper_cone, monotone_points)
        El, Ehat, tau_lo, tau_hi = _set_parameters(P, D)
        G, cs = _ellipse_matrix(D.u_s, D.u_w, D.radius, D.rho)
        P["G"].value, P["cs"].value = G, cs
        cert = solve_and_certify(prob, _box(V, n, tau_lo, tau_hi, D), ladder=SOLVER_LADDER)
        rounds = 1
        log += [(s, st, _to_g(b, D), sec) for (s, st, b, sec) in cert.log]
        if cert.converged:
            best, best_status, best_solver, primal = _to_g(cert.bound, D), cert.status, cert.solver, _to_g(cert.primal, D)
    else:
        best, best_status, best_solver, primal, rounds, n_facets, log = _solve_linf(problem, D, upper_cone,
                                                                                    monotone_points)
    from attncert.certify.first_order_certificate import first_order_certificate

    fo = first_order_certificate(problem)
    seconds = time.perf_counter() - t0
    if math.isfinite(best) and best <= fo + FO_TIE * (1.0 + abs(fo)):
        if best > fo:  # equal up to rounding (e.g. a single token: both are exact): keep the smaller
            best, best_status = fo, f"{best_status}; first-order bound equal"
        return SecondOrderResult(best, best_status, best_solver, seconds, False, primal=primal, rounds=rounds,
                                 n_facets=n_facets, log=log)
    # no usable solve, or a (sound but) numerically loose bound above the first-order certificate, which
    # the exact relaxation can never exceed (its weights and values lie in the first-order intervals)
    reason = "second-order bound above first-order" if math.isfinite(best) else (log[-1][1] if log else "not_run")
    return SecondOrderResult(fo, f"fallback: {reason}", "first_order", time.perf_counter() - t0, True,
                             primal=primal, rounds=rounds, n_facets=n_facets, log=log)
