"""The factored varying-query program (`factored`): its cvxpy problem, parameters and box.

Builder code only (no solver): the program is determined by the build key and the relaxation data
`varying_query.data.VaryingData` (and, for linf, the facet edges), so a checker can rebuild it
(`attncert.audit.program_link`).
"""
from __future__ import annotations

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.relaxation.key_support_cut import support_rows
from attncert.certify.second_order.relaxation.rows import (ellipse_matrix, polygon_constraints, softmax_bounds,
                                                      weight_coefficients, weight_parameters)
from attncert.certify.second_order.dual_bound.compiled import assign, mark_one_shot
from attncert.certify.second_order.varying_query.box_scaling import column_norms
from attncert.certify.second_order.varying_query.data import VaryingData, start_chains
from attncert.head.rounding import UNIT_ROUNDOFF

_CACHE: dict = {}
_U = UNIT_ROUNDOFF
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
    A key whose query factor is constant (H = 0, kb = 0: btilde = tau whatever mu is) gets mu <= tau, which mu = 0
    satisfies, instead of a division by zero.
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
    flat = kb <= 0.0
    safe = np.where(flat, 1.0, kb)
    return (np.where(flat, 1.0, (a + margin) / safe), np.where(flat, 0.0, b / safe),
            np.where(flat, 0.0, c / safe))


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
    key = (norm, Vt.shape, Vt.dtype.str, np.ascontiguousarray(Vt).tobytes(), S.shape, S.dtype.str,
           np.ascontiguousarray(S).tobytes())
    if key in _BUDGETS:
        return _BUDGETS[key].copy()
    out = np.empty(S.shape[0])
    for i, row in enumerate(S):
        B = Vt[row > 0]
        if norm == "linf":
            g = column_norms(B)
            G = (B / g) @ B.T
            lam = float(np.linalg.eigvalsh(G)[-1]) + 64.0 * _U * (B.shape[1] + 10) * float(np.trace(G))
            val = lam * float(g.sum()) * (1.0 + 1e-9)
        else:
            G = B @ B.T
            val = (float(np.linalg.eigvalsh(G)[-1]) + 64.0 * _U * (B.shape[1] + 10) * float(np.trace(G))) * (1.0 + 1e-9)
        out[i] = min(val + 1e-12, float(B.shape[0]))
    if len(_BUDGETS) >= _BUDGETS_KEPT:
        _BUDGETS.pop(next(iter(_BUDGETS)))
    _BUDGETS[key] = out.copy()
    return out


#: `query_budget`'s last results by their exact inputs (the paper-like and the tight program of a unit have the same
#: data, so the second gets the first's budgets: the same numbers, computed once)
_BUDGETS: dict = {}
_BUDGETS_KEPT = 4


#: Above this many tokens the varying query's cvxpy programs are compiled per solve without cvxpy's parameter
#: tensor (`compiled.mark_one_shot`): there they are solved once or a few times per unit (beside the long path,
#: `long.BESIDE_MAX`), and the tensor is what costs (GPT-2-sized head, 64 keys, linf, factored: 24.5 s and 2.5 GB
#: against 0.26 s per compilation without it). Up to it the tensor is built once per shape and refilled per solve.
ONE_SHOT_ABOVE = 16
SUPPORT_SLOTS = 8  # linf: multipliers of the keys' support cuts a program can carry (the first solve's 6, 2 rounds')


def build_factored_program(n: int, d: int, norm: str, K: int, mono: int, second: bool, upper_cone: bool,
                           support: int = 0):
    """The cvxpy program of `factored` (its docstring states it), cached by its shape; K facet slots per token
    (linf) and `support` slots of the keys' support cuts (linf, `fill_support`), each one row per key:
    sup_base_j btilde_j - sup_lam_j lam_j - sup_V_j V_j,omega - sup_U_j U_j,omega >= 0."""
    key = ("factored", n, d, norm, K, mono, second, upper_cone, support)
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
    if upper_cone:  # (C5) base >= a e^{-s}, per unit of E_l (as in `rows.weight_constraints`)
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
    if support:
        for name in ("sup_base", "sup_lam", "sup_V", "sup_U"):
            P[name] = cp.Parameter((support, m), name=name)
    for i in range(support):
        cons.append(cp.multiply(P["sup_base"][i], bt) - cp.multiply(P["sup_lam"][i], lam[:m])
                    - cp.multiply(P["sup_V"][i], V[:m, 1]) - cp.multiply(P["sup_U"][i], U[:m, 1]) >= 0)
    objective = cp.Maximize(P["c_base"] @ base + P["c_lam"] @ lam + P["c_V"] @ V[:, 1] + P["c_U"] @ U[:, 1])
    variables.update(lam=lam, U=U, V=V, SU=SU, SV=SV, W=W)
    prob = cp.Problem(objective, cons)
    entry = (mark_one_shot(prob) if n > ONE_SHOT_ABOVE else prob, P, variables)
    _CACHE[key] = entry
    return entry


def widths(D: VaryingData) -> tuple[np.ndarray, np.ndarray]:
    """(Hf, hk): per-token half-width of the query factor (0 for the query token) and of the key factor."""
    Hf = D.scales[:, 2] * D.active[:, 2]
    Hf = Hf.copy()
    Hf[-1] = 0.0
    hk = (D.scales[:, 0] * D.active[:, 0] + D.scales[:, 3] * D.active[:, 3]) * (1.0 + 4.0 * _U)
    return Hf, hk


def value_offsets(D: VaryingData) -> np.ndarray:
    """wt_j = (w0_j + eps_w,j - g0) / rho_o rounded up: each token's value above the origin in objective units."""
    wt = (D.w0 + D.eps_w - D.g0) / D.rho_o
    return wt + 4.0 * _U * (np.abs(D.w0) + D.eps_w + abs(D.g0)) / D.rho_o + 4.0 * _U * np.abs(wt)


def support_cut_rows(D: VaryingData, ts) -> list:
    """The keys' support cuts at the multipliers ts (`key_support_cut.support_rows`) for this program's data."""
    Hf, hk = widths(D)
    k = weight_coefficients(D.A - Hf, hk, D.eps, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, 0)
    return support_rows(D, hk, k["kappa"], k["Ehat"], value_offsets(D), start_chains(D)[0], ts)


def fill_support(P: dict, D: VaryingData, ts) -> None:
    """The support-cut slots of a program built with `support` > 0 (linf): the keys' cuts at the multipliers ts
    (`support_cut_rows`), the trivial row btilde >= 0 in unused slots. ValueError when ts has more entries than
    slots or a non-finite one."""
    slots, m = P["sup_base"].shape
    ts = np.asarray(ts, dtype=np.float64).reshape(-1)
    if ts.size > slots:
        raise ValueError(f"{ts.size} support-cut multipliers for {slots} slots")
    out = [np.zeros((slots, m)) for _ in range(4)]
    out[0][:] = 1.0
    for i, row in enumerate(support_cut_rows(D, ts)):
        # each key's row divided by the power of two at or below its largest coefficient: exact, the same set,
        # and O(1) coefficients for the solver
        scale = np.max(np.abs(np.stack(row)), axis=0)
        scale = np.exp2(np.floor(np.log2(np.where(scale > 0, scale, 1.0))))
        for o, r in zip(out, row):
            o[i] = r / scale
    for name, o in zip(("sup_base", "sup_lam", "sup_V", "sup_U"), out):
        assign(P[name], o)


def set_factored_parameters(P: dict, D: VaryingData):
    m = D.n - 1
    Hf, hk = widths(D)
    El, Ehat, _, _ = weight_parameters(P, D.A - Hf, hk, D.eps, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w)
    wt = value_offsets(D)
    # `assign`: the values cvxpy's setter would store, without its per-assignment projection check
    assign(P["c_base"], El * wt + 4.0 * _U * El * np.abs(wt) + 1e-300)
    assign(P["n_base"], El)
    kb = np.expm1(2.0 * Hf)
    assign(P["kb"], kb[:m])
    assign(P["hb"], Hf[:m])
    act = D.active
    assign(P["ks"], D.scales[:, 0] * act[:, 0] / hk)
    assign(P["kbb"], D.scales[:, 3] * act[:, 3] / hk)
    assign(P["ib"], act[:, 3] * (1.0 + 4.0 * _U))
    assign(P["Pe"], D.Vt[:m])
    assign(P["Pq"], D.Vt[m:])
    if "Lb" in P:
        assign(P["Sb"], budget_subsets(m, np.argsort(-D.A[:m], kind="stable")))
        assign(P["Lb"], query_budget(D.Vt[:m], D.norm, P["Sb"].value))
        for name, rows in zip(("qa", "qb", "qc"), quadratic_rows(Hf[:m])):
            assign(P[name], rows)
    if "G" in P:
        P["G"].value, P["cs"].value = ellipse_matrix(D.u_s, D.u_w, D.radius, D.scales[0, 0], D.rho_w)
        P["Gq"].value, P["csq"].value = ellipse_matrix(D.u_q, D.u_w, D.radius, D.scales[-1, 0], D.rho_w)
    tau_lo, tau_hi = softmax_bounds(El, El * Ehat * np.exp(2.0 * Hf))
    return tau_lo, tau_hi, Hf


def factored_box(V: dict, D: VaryingData, tau_lo: float, tau_hi: float, Hf: np.ndarray) -> dict:
    """A box containing every lifted true point (the certification box of `weak_duality`)."""
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
