"""The fixed-query program of the second-order relaxation: its data, its cvxpy problem, parameters and box.

This module builds; it never solves (`monolithic` solves and certifies). The builder's inputs -- the build key
(n, norm, slots, variant, monotone points, deviation form), the relaxation data `FixedRelaxationData` and, for
linf, the facet edges of each token -- determine the canonical conic program bit for bit, so that a checker can
rebuild the program a certificate was computed on (`attncert.audit.program_link`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.dual_bound.compiled import assign
from attncert.certify.second_order.relaxation.rows import (DEVIATION_BELOW, ellipse_matrix, nu_bound,
                                                      polygon_constraints, relaxation_problem, weight_constraints,
                                                      weight_parameters)

_CACHE: dict = {}


@dataclass
class FixedRelaxationData:
    """The fixed-query reduction in the relaxation's units (scores shifted, coordinates in units of their range)."""

    A: np.ndarray  # shifted nominal scores s0 - shift
    w0: np.ndarray
    g0: float  # nominal value (objective origin)
    eps_s: np.ndarray
    eps_w: np.ndarray
    u_s: np.ndarray
    u_w: np.ndarray
    R_s: float  # >= max |sigma| over P (rounded up): the score unit and half-width h
    R_w: float  # >= max |omega| over P (rounded up)
    rho_w: float  # value unit (R_w, or 1 when values do not move)
    rho_o: float  # objective unit
    radius: float
    norm: str
    kept: tuple = ()  # (keep mask, tail) of `ReducedGeometry.kept_tokens`
    tail: float = 0.0  # sound bound on the effect of the dropped (negligible) tokens, added to the bound

    @property
    def scales(self) -> np.ndarray:
        return np.tile([self.R_s, self.rho_w], (self.A.size, 1))

    @property
    def deviation(self) -> bool:
        return self.R_s < DEVIATION_BELOW

    def drop_negligible(self) -> "FixedRelaxationData":
        """The same data without the tokens that can never carry weight (the record's `kept_tokens`)."""
        keep, tail = self.kept
        if np.all(keep):
            return self
        return replace(self, A=self.A[keep], w0=self.w0[keep], eps_s=self.eps_s[keep], eps_w=self.eps_w[keep],
                       tail=tail)


def build_fixed_program(n: int, norm: str, K: int, upper_cone: bool, mono: int, deviation: bool):
    key = ("fixed", n, norm, K, upper_cone, mono, deviation)
    if key in _CACHE:
        return _CACHE[key]
    tau = cp.Variable(name="tau")
    lam = cp.Variable(n, name="lam")
    U = cp.Variable((n, 2), name="U")
    V = cp.Variable((n, 2), name="V")
    nu = cp.Variable(n, name="nu") if deviation else None
    P: dict = {}
    tau_n = tau * np.ones(n)
    cons = weight_constraints(P, n, tau, lam, U[:, 0], V[:, 0], upper_cone, mono, nu)
    if norm == "l2":
        P["G"] = cp.Parameter((2, 2), name="G")
        P["cs"] = cp.Parameter(nonneg=True, name="cs")
        cons += [cp.SOC(P["cs"] * lam, P["G"] @ U.T, axis=0),
                 cp.SOC(P["cs"] * (tau_n - lam), P["G"] @ V.T, axis=0)]
    else:
        cons += polygon_constraints(P, n, K, U, V, lam, tau_n)
    entry = _CACHE[key] = relaxation_problem(P, cons, dict(tau=tau, lam=lam, U=U, V=V), nu)
    return entry


def set_fixed_parameters(P: dict, D: FixedRelaxationData):
    n = D.A.size
    out = weight_parameters(P, D.A, np.full(n, D.R_s), D.eps_s, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w)
    if "G" in P:
        G, cs = ellipse_matrix(D.u_s, D.u_w, D.radius, D.R_s, D.rho_w)
        assign(P["G"], G)
        assign(P["cs"], cs)
    return out


def fixed_box(V: dict, n: int, tau_lo: float, tau_hi: float, D: FixedRelaxationData) -> dict:
    """A box containing every lifted true point (the certification box of `weak_duality`)."""
    inflate = 1.0 + 1e-9
    wb = D.R_w / D.rho_w * inflate
    up = np.full(n, tau_hi * inflate)  # lam <= tau
    uv = np.stack([np.full(n, inflate), np.full(n, wb)], axis=1)
    box = {V["tau"]: (tau_lo, tau_hi), V["lam"]: (np.zeros(n), up), V["U"]: (-uv * up[:, None], uv * up[:, None]),
           V["V"]: (-uv * tau_hi, uv * tau_hi)}
    if "nu" in V:
        box[V["nu"]] = (np.zeros(n), nu_bound(np.full(n, D.R_s), D.eps_s, tau_hi))
    return box
