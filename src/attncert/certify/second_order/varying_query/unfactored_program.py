"""The unfactored varying-query program of the second-order relaxation: its cvxpy problem, parameters and box.

This module builds; it never solves (`unfactored` solves and certifies; the program is stated in its docstring).
The builder's inputs -- the build key (n, d, norm, slots, variant, monotone points, deviation form), the fields
of `VaryingData` and, for linf, the facet edges of each token -- determine the canonical conic program bit for
bit, so that a checker can rebuild the program a certificate was computed on (`attncert.audit.program_link`).
"""
from __future__ import annotations

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.relaxation.rows import (ellipse_matrix, nu_bound, polygon_constraints,
                                                      relaxation_problem, weight_constraints, weight_parameters)
from attncert.certify.second_order.dual_bound.compiled import mark_one_shot
from attncert.certify.second_order.varying_query.data import VaryingData
from attncert.certify.second_order.varying_query.program import ONE_SHOT_ABOVE
from attncert.head.rounding import UNIT_ROUNDOFF

_CACHE: dict = {}


def build_varying_program(n: int, d: int, norm: str, K: int, upper_cone: bool, mono: int, deviation: bool):
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
    entry = _CACHE[key] = relaxation_problem(P, cons, dict(tau=tau, lam=lam, U=U, V=V, SU=SU, SV=SV, W=W), nu)
    if n > ONE_SHOT_ABOVE:
        mark_one_shot(entry[0])
    return entry


def set_varying_parameters(P: dict, D: VaryingData):
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


def varying_box(V: dict, D: VaryingData, tau_hi: float, tau_lo: float) -> dict:
    """A box containing every lifted true point (the certification box of `weak_duality`)."""
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
