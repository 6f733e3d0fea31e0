"""The bound of a support-function certificate (fixed query, long contexts), recomputed without a solver.

The long-context path (`certify.second_order.fixed_query.separable`) bounds the relaxation of docs/certificate.md §4.1
from a
dual vector z of the token program (`token_program.build_program` without facets) through the exact support
function of P. With X the set every lifted true point lies in (tau in [tau_lo, tau_hi]; per token
0 <= lam_j <= tau, U_j in lam_j Phat, V_j in (tau - lam_j) Phat, 0 <= nu_j <= tau nubar_j;
Phat = {(u_s.delta / R_s, u_w.delta / rho_w) : ||delta|| <= r}) and z in K^*, every lifted true point x has

    -c.x <= z.b + g.x,     g = -(c + A^T z),
    max_X g.x = max(tau_lo Q, tau_hi Q),
    Q = g_tau + sum_j [ max(g_lam_j + h(g_Us_j, g_Uw_j), h(g_Vs_j, g_Vw_j)) + nubar_j max(g_nu_j, 0) ],
    h(a, b) = ||a G0 + b G1||_*,   G0 = r u_s / R_s,   G1 = r u_w / rho_w          (l1 for linf, l2 for l2),

plus the program's data rounding, data_rel_err (tau_hi (|z|.|A| m + |c|.m) + |z|.|b|) with m = 1 per unit tau
(nubar_j for nu_j). The reported value must be at or above origin + scale * bound + tail.

Arithmetic. g is formed in float64 with its a-priori error gamma_{k+2} (|c| + |A|^T |z|) per column (k nonzeros)
and continues as balls. The support function is a d-dimensional product per token, done in float64: with
a = a_m +- a_r (a ball of g), G0f = fl(fl(r u_s) / R_s) (|G0 - G0f| <= gamma_2 |G0f| (1 + gamma_2)) and Mf =
fl(a_m G0f + b_m G1f), every |M_i| of the exact M = a G0 + b G1 is at most
|Mf_i| + (a_r + gamma_5 |a_m|)(1 + gamma_2)|G0f_i| + (b_r + gamma_5 |b_m|)(1 + gamma_2)|G1f_i|, so

    h(a, b) <= nu(Mf) (1 + 2 gamma_{d+3}) + (a_r + gamma_5 |a_m|)(1 + gamma_2) nu(G0f) (1 + 2 gamma_{d+3}) + (same, b),

nu the l1 or l2 norm evaluated in float64 (relative error gamma_{d+3} at most). These upper ends, the maxima per
token, the sum over tokens, the max over tau and the map to g are ball arithmetic (flint `arb`): every function of
g above is nondecreasing in each h, so upper ends suffice.

The builder, `token_program.build_program`, is builder code only (its Clarabel solve is `token_solve`); the audit
imports it inside the functions that rebuild and never reaches a solve (tests/audit/test_trusted_base.py, the
no-solver tests).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from flint import arb

from attncert.audit.program_link import data_from_reduction
from attncert.certify.second_order.dual_bound.data_error import DATA_REL_ERR
from attncert.certify.second_order.fixed_query.program import FixedRelaxationData
from attncert.head.rounding import gamma


@dataclass
class SupportLink:
    """Whether the stored token program is the builder's for the row's unit (`margin` 0 yes, -inf no, with `why`),
    the rebuilt program, and its map (origin, scale, tail) to g units (never the stored one)."""

    margin: float
    why: str = ""
    prog: object = None  # the rebuilt `token_program.Program`
    data: FixedRelaxationData | None = None
    affine: tuple = ()


def support_link(stored: dict, red: dict, radius: float, norm: str, mode: str) -> SupportLink:
    """Rebuild the token program from the stored relaxation data (checked against the reduction: `program_link.
    data_from_reduction`) with its builder and compare it with the stored one bit for bit."""
    build = {k[len("build/"):]: v for k, v in stored.items() if k.startswith("build/")}
    if str(build.get("path", "")) != "support" or "key" not in build:
        return SupportLink(-math.inf, "no builder inputs of the token program stored: it cannot be rebuilt")
    if mode != "fixed":
        return SupportLink(-math.inf, f"a support-function certificate (fixed query) on a {mode}-query row")
    why = data_from_reduction(build, red, radius, norm)
    if why:
        return SupportLink(-math.inf, why)
    n, key_norm, upper_cone, mono = json.loads(str(build["key"]))
    if key_norm != norm or int(n) != np.asarray(build["A"]).size:
        return SupportLink(-math.inf, f"build key for n = {n}, {key_norm}; the row's unit has "
                                      f"n = {np.asarray(build['A']).size}, {norm}")
    D = FixedRelaxationData(A=build["A"], w0=build["w0"], g0=float(build["g0"]), eps_s=build["eps_s"],
                            eps_w=build["eps_w"], u_s=red["u_s"], u_w=red["u_w"], R_s=float(build["R_s"]),
                            R_w=float(build["R_w"]), rho_w=float(build["rho_w"]), rho_o=float(build["rho_o"]),
                            radius=float(build["radius"]), norm=str(build["norm"]), tail=float(build["tail"]))
    # the builder only: module docstring
    from attncert.certify.second_order.fixed_query.token_program import build_program

    prog = build_program(D, bool(upper_cone), int(mono))
    A = sp.csr_matrix(stored["A"])
    ref = sp.csr_matrix(prog.A)
    dims = prog.dims
    for name, ok in (("cones", _same(stored["dims"], [dims.zero, dims.nonneg, dims.exp, *dims.soc])),
                     ("c", _same(stored["c"], prog.c)), ("b", _same(stored["b"], prog.b)),
                     ("A", A.shape == ref.shape and (A != ref).nnz == 0)):
        if not ok:
            return SupportLink(-math.inf, f"the stored token program's {name} differs from the rebuilt one")
    affine = (float(D.g0), float(D.rho_o), float(D.tail))
    if not _same(np.asarray(stored["affine"], dtype=np.float64), np.asarray(affine)):
        return SupportLink(-math.inf, f"the stored map to g {tuple(np.asarray(stored['affine']).tolist())} is not the "
                                      f"one its program was built with {affine}")
    if float(stored["data_rel_err"]) != DATA_REL_ERR:
        return SupportLink(-math.inf, f"the stored data-error model {float(stored['data_rel_err'])} is not the "
                                      f"certifier's {DATA_REL_ERR}")
    if "t" in stored and not float(stored["t"]) == float(np.asarray(stored["z"])[prog.families["norm"][0]]):
        return SupportLink(-math.inf, "the stored multiplier t is not the dual's normalization entry")
    if not (math.isfinite(affine[0]) and 0 < affine[1] < math.inf and 0 <= affine[2] < math.inf):
        return SupportLink(-math.inf, f"the map to g {affine} is not finite with a positive scale")
    return SupportLink(0.0, "", prog, D, affine)


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a, b)


def _norm(M: np.ndarray, norm: str) -> np.ndarray:
    return np.abs(M).sum(axis=-1) if norm == "linf" else np.sqrt((M * M).sum(axis=-1))


def _support_upper(a_m, a_r, b_m, b_r, G0f, G1f, norm: str) -> np.ndarray:
    """Per token, a float64 number whose value is >= h(a, b) for every a in [a_m +- a_r], b in [b_m +- b_r]
    (module docstring); the caller adds it as a ball with a relative radius of 8u."""
    d = G0f.size
    grow = 1.0 + 2.0 * gamma(d + 3)
    Mf = a_m[:, None] * G0f[None, :] + b_m[:, None] * G1f[None, :]
    N0, N1 = float(_norm(G0f, norm)) * grow, float(_norm(G1f, norm)) * grow
    g2, g5 = 1.0 + gamma(2), gamma(5)
    return _norm(Mf, norm) * grow + (a_r + g5 * np.abs(a_m)) * g2 * N0 + (b_r + g5 * np.abs(b_m)) * g2 * N1


def _up(x: float) -> arb:
    """A ball whose upper end is >= the exact value of the float64 expression x (a few roundings: relative error
    below 16u)."""
    return arb(x) * arb(1.0 + 16.0 * 2.0 ** -53) if x >= 0 else arb(x) * arb(1.0 - 16.0 * 2.0 ** -53)


def support_bound_upper(prog, z: np.ndarray, u_s: np.ndarray, u_w: np.ndarray, radius: float, R_s: float,
                        rho_w: float, norm: str, data_rel_err: float = DATA_REL_ERR) -> arb:
    """A ball whose upper end bounds z.b + max_X g.x plus the data rounding (module docstring), in objective units.
    z must be in K^* (`dual_cone`); prog: the rebuilt `token_program.Program`."""
    from attncert.certify.second_order.fixed_query.token_program import LAM, NU, US, UW, VS, VW

    A = sp.csc_matrix(prog.A)
    absA = abs(A)
    c, b = prog.c, prog.b
    g = -(c + A.T @ z)
    k = np.diff(A.indptr).astype(np.float64)
    g_err = gamma(k + 2.0) * (np.abs(c) + absA.T @ np.abs(z)) * (1.0 + 1e-6) + 1e-300
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(g_err))):
        return arb("+inf")
    G0f = (radius * np.asarray(u_s, dtype=np.float64)) / R_s
    G1f = (radius * np.asarray(u_w, dtype=np.float64)) / rho_w
    v = {j: prog.var(j) for j in (LAM, US, UW, VS, VW)}
    hU = _support_upper(g[v[US]], g_err[v[US]], g[v[UW]], g_err[v[UW]], G0f, G1f, norm)
    hV = _support_upper(g[v[VS]], g_err[v[VS]], g[v[VW]], g_err[v[VW]], G0f, G1f, norm)
    if prog.nv > NU:
        gnu, enu = g[prog.var(NU)], g_err[prog.var(NU)]
    Q = arb(float(g[0]), float(g_err[0]))
    for j in range(prog.n):
        i = int(v[LAM][j])
        up = arb(float(g[i]), float(g_err[i])) + _up(float(hU[j]))
        Q += up.max(_up(float(hV[j])))
        if prog.nv > NU:
            Q += arb(float(prog.nubar[j])) * arb(float(gnu[j]), float(enu[j])).max(arb(0))
    if not math.isfinite(float(Q.upper())):
        return arb("+inf")
    total = (arb(prog.tau_lo) * Q).max(arb(prog.tau_hi) * Q)
    for i in np.flatnonzero(b):
        total += arb(float(z[i])) * arb(float(b[i]))
    mag = np.ones(c.size)
    if prog.nv > NU:
        mag[prog.var(NU)] = prog.nubar
    rounding = prog.tau_hi * float(np.abs(z) @ (absA @ mag) + np.abs(c) @ mag) + float(np.abs(z) @ np.abs(b))
    total += arb(data_rel_err) * arb(rounding) * arb(1.0 + 1e-6)
    return total if math.isfinite(float(total.upper())) else arb("+inf")
