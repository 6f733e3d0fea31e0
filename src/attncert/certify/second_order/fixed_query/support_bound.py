"""The certified bound of the fixed-query relaxation from any dual vector, through the exact support function of P.

Write X for the set every lifted true point lies in (tau in [tau_lo, tau_hi]; per token 0 <= lam_j <= tau,
U_j in lam_j Phat, V_j in (tau - lam_j) Phat, 0 <= nu_j <= tau nubar_j, with Phat the *exact* image of the ball in
unit coordinates). For any dual vector z of the rows that are not X's (the weight rows (C1)-(C5) and the
deviation rows, repaired into K^*; the normalization row's multiplier free), every point x of X satisfying the
rows has

    f(x) <= f(x) + z^T (b - A x) = z^T b + g^T x,          g = -(c + A^T z),

and the right-hand side separates: with tau scaled out,

    max_X g^T x = max_{tau in [tau_lo, tau_hi]} tau Q,
    Q = g_tau + sum_j [ max( g_lam_j + h(g_Us_j, g_Uw_j),  h(g_Vs_j, g_Vw_j) ) + nubar_j max(g_nu_j, 0) ],

h the support function of Phat: h(a, b) = r ||a u_s / R_s + b u_w / rho_w||_* (l1 norm of the box, l2 norm of
the ball): one (n x 2) by (2 x d) product for all tokens. The bound z^T b + max(tau_lo Q, tau_hi Q) is sound for
any z; the solver only decides how tight it is.

The normalization multiplier t = z_0 (row sum_j E_lj (tau + kappa_j lam_j) = 1) enters only g_tau and the g_lam_j,
linearly, and z^T b through t: with the other multipliers fixed the bound is, up to its rounding terms,

    B(t) = z_rest^T b_rest + t + max(tau_lo Q(t), tau_hi Q(t)),     Q(t) = Q computed from g(0) - t a_0,

a_0 the normalization row: convex and piecewise linear in t. When tau_hi / tau_lo = e^{2 R_s} is large, a Q
slightly above 0 costs tau_hi Q, so the t a solver or an interpolation gives can be far from the best one for the
same other multipliers. `best_multiplier` minimizes B by golden-section search on O(n) evaluations (the support
functions do not depend on t); the bound is then computed by `bound_from_dual` at that t like at any other. Outward
rounding as in `weak_duality.weak_duality_bound`
(the error of g, of the support functions and of the sums, and the data rounding of the program's rows).
"""
from __future__ import annotations

import math

import numpy as np

from attncert.certify.second_order.dual_bound.data_error import DATA_REL_ERR
from attncert.certify.second_order.dual_bound.weak_duality import repair_dual
from attncert.certify.second_order.dual_bound.dual_record import offer_support
from attncert.certify.second_order.fixed_query.token_program import LAM, NU, US, UW, VS, VW, Program
from attncert.head.rounding import UNIT_ROUNDOFF, gamma, round_up

_U = UNIT_ROUNDOFF


def unit_generators(D, norm: str) -> np.ndarray:
    """(2, d): r u_s / R_s and r u_w / rho_w, the generators of Phat (each of dual norm <= 1 up to rounding)."""
    return np.stack([D.radius * D.u_s / D.R_s, D.radius * D.u_w / D.rho_w])


_RECENT = {}  # the last few `_support` results, keyed by their exact inputs
_RECENT_SIZE = 8


def _support(a: np.ndarray, b: np.ndarray, gens: np.ndarray, norm: str) -> tuple[np.ndarray, np.ndarray]:
    """(h, err): h(a_j, b_j) = ||a_j gens[0] + b_j gens[1]||_* computed in float64, and a bound on its error.

    gens: (2, d) the unit generators r u_s / R_s and r u_w / rho_w (each row of dual norm <= 1 + 4u).

    The normalization multiplier does not enter g_Us, g_Uw, g_Vs, g_Vw (its row has only tau and the lam_j), so
    the bounds of one dual at several multipliers (`best_multiplier`, then `bound_from_dual` at its t) ask for the
    same support functions: a result is reused when a, b, gens and norm are bit for bit the same as a recent call's
    (the O(n d) product is the bound's main cost at many keys)."""
    a, b = np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(b, dtype=np.float64)
    key = (norm, gens.shape, gens.tobytes(), a.tobytes(), b.tobytes())
    hit = _RECENT.get(key)
    if hit is not None:
        return hit[0].copy(), hit[1].copy()
    h, err = _support_product(a, b, gens, norm)
    if len(_RECENT) >= _RECENT_SIZE:
        del _RECENT[next(iter(_RECENT))]
    _RECENT[key] = (h, err)
    return h.copy(), err.copy()


def _support_product(a: np.ndarray, b: np.ndarray, gens: np.ndarray, norm: str) -> tuple[np.ndarray, np.ndarray]:
    """`_support` computed: one (n x 2) by (2 x d) product."""
    M = a[:, None] * gens[0][None, :] + b[:, None] * gens[1][None, :]
    d = gens.shape[1]
    if norm == "linf":
        h = np.abs(M).sum(axis=1)
    else:
        h = np.sqrt((M * M).sum(axis=1))
    err = gamma(2 * d + 8) * (np.abs(a) + np.abs(b)) * (1.0 + 1e-9) + 4.0 * _U * h
    return h, err


def best_multiplier(prog: Program, z: np.ndarray, gens: np.ndarray, norm: str, t0: float, iters: int = 200) -> float:
    """The normalization multiplier t minimizing B(t) (module docstring; rounding terms left out: the bound at the
    returned t is certified by `bound_from_dual`) for the other multipliers of z, searched around t0."""
    with np.errstate(all="ignore"):
        mag = np.ones(prog.c.size)
        if prog.nv > NU:
            mag[prog.var(NU)] = prog.nubar
        zr = repair_dual(z, prog.dims, prog.abs_A @ mag * prog.tau_hi + np.abs(prog.b) + 1e-300)
        zr[prog.simple] = 0.0
        i0 = prog.families["norm"][0]
        zr[i0] = 0.0
        a0 = np.asarray(prog.A[[i0], :].todense()).ravel()
        g0 = -(prog.c + prog.A.T @ zr)
        hU, _ = _support(g0[prog.var(US)], g0[prog.var(UW)], gens, norm)
        hV, _ = _support(g0[prog.var(VS)], g0[prog.var(VW)], gens, norm)
        nu_term = prog.nubar * np.maximum(g0[prog.var(NU)], 0.0) if prog.nv > NU else 0.0
        glam, alam, b0 = g0[prog.var(LAM)], a0[prog.var(LAM)], float(prog.b[i0])
        if not (np.all(np.isfinite(hU)) and np.all(np.isfinite(hV)) and np.all(np.isfinite(glam))
                and math.isfinite(t0)):
            return t0

        def B(t):
            Q = float(np.sum(np.maximum(glam - t * alam + hU, hV) + nu_term)) + float(g0[0] - t * a0[0])
            return t * b0 + max(prog.tau_lo * Q, prog.tau_hi * Q)

        width = 2.0 * (1.0 + abs(t0))
        a, b = t0 - width, t0 + width
        phi = (math.sqrt(5.0) - 1.0) / 2.0
        x1, x2 = b - phi * (b - a), a + phi * (b - a)
        f1, f2 = B(x1), B(x2)
        for _ in range(iters):
            if f1 <= f2:
                b, x2, f2 = x2, x1, f1
                x1 = b - phi * (b - a)
                f1 = B(x1)
            else:
                a, x1, f1 = x1, x2, f2
                x2 = a + phi * (b - a)
                f2 = B(x2)
        t = 0.5 * (a + b)
        return t if math.isfinite(B(t)) and B(t) <= B(t0) else t0


def _fsum(values: np.ndarray) -> float:
    """math.fsum, or +inf when the exact sum overflows or meets inf - inf (the bound is then +inf)."""
    try:
        return math.fsum(values.tolist())
    except (OverflowError, ValueError):
        return math.inf


def bound_from_dual(prog: Program, z: np.ndarray, gens: np.ndarray, norm: str,
                    data_rel_err: float = DATA_REL_ERR, offer: bool = True) -> tuple[float, np.ndarray]:
    """Sound upper bound on max f over the lifted true points, from any dual vector z (see module docstring).

    Any z of the program's length gives a finite sound bound or +inf, never an exception: non-finite entries are
    zeroed by the repair (any point of K^* is a valid multiplier), an exponential-cone repair that would need the
    logarithm of an underflowed ratio takes the other coordinate, and any overflow or inf - inf on the way (IEEE
    arithmetic, exact sums that leave the float range) makes the result +inf, never a finite number.

    offer: the bound is offered as the certificate of the unit's number (`dual_record.offer_support`); False for a
    program that is not the unit's own (the token family's grid programs, whose bounds only rank their duals).

    Returns (bound in objective units, the repaired z)."""
    with np.errstate(all="ignore"):
        bound, zr = _bound_from_dual(prog, z, gens, norm, data_rel_err)
    if offer:
        offer_support(bound, prog, zr)  # kept with what certifies it (`dual_record.SupportCertificate`)
    return bound, zr


def _bound_from_dual(prog, z, gens, norm, data_rel_err):
    nv = prog.nv
    mag = np.ones(prog.c.size)  # per unit tau: |lam|, |Us|, |Uw|, |Vs|, |Vw| <= 1 on X; nu <= nubar
    if nv > NU:
        mag[prog.var(NU)] = prog.nubar
    mag *= 1.0 + 1e-9
    absA = prog.abs_A
    row_cost = absA @ mag  # per unit tau (b enters once, below)
    zr = repair_dual(z, prog.dims, (row_cost * prog.tau_hi + np.abs(prog.b)) * (1.0 + data_rel_err) + 1e-300)
    zr[prog.simple] = 0.0
    g = -(prog.c + prog.A.T @ zr)
    col_nnz = np.diff(prog.A.indptr)
    ku = (col_nnz + 3) * _U
    g_err = ku / (1.0 - ku) * (np.abs(prog.c) + absA.T @ np.abs(zr))
    hU, eU = _support(g[prog.var(US)], g[prog.var(UW)], gens, norm)
    hV, eV = _support(g[prog.var(VS)], g[prog.var(VW)], gens, norm)
    up = g[prog.var(LAM)] + hU
    D = np.maximum(up, hV)
    if nv > NU:
        D = D + prog.nubar * np.maximum(g[prog.var(NU)], 0.0)
    Q = _fsum(D) + float(g[0])
    # errors per unit tau: of g (times the magnitude of its variable), of the support functions, of the sums
    err = float(g_err @ mag) + float(np.maximum(eU, eV).sum()) + 4.0 * _U * float(np.abs(D).sum() + np.abs(up).sum())
    err += 2.0 * np.spacing(abs(Q)) + data_rel_err * (float(np.abs(zr) @ row_cost) + float(np.abs(prog.c) @ mag))
    zb = _fsum(zr * prog.b)
    Q_hi = Q + 2.0 * err
    total = zb + max(prog.tau_lo * Q_hi, prog.tau_hi * Q_hi)
    total += 4.0 * _U * (abs(zb) + prog.tau_hi * abs(Q_hi)) + data_rel_err * float(np.abs(zr) @ np.abs(prog.b))
    total += 1e-300
    if not math.isfinite(total):  # inf or nan: some term left the float range
        return math.inf, zr
    return round_up(total), zr


