"""The first-order certificate from its stored data: intervals that enclose the exact ranges, and the LP value.

Stored: score intervals [l_j, u_j] and value upper bounds W_j, and the reported value U. The certificate says

    g = sum_j a_j w_j <= sum_j a_j W_j <= U     for all s in [l, u],  a = softmax(s),

which holds iff  sum_j e^{s_j} (W_j - U) <= 0  for every s in the box, i.e. iff

    F1(U) = sum_j max(e^{l_j} (W_j - U), e^{u_j} (W_j - U)) <= 0                          (checked in balls)

(the max is at u_j when W_j > U and at l_j otherwise). The intervals must enclose the exact ranges of the unit,
computed from the weights (`head_enclosure`): for every delta in the ball,

    fixed query:   s_j - s0_j = u_s.delta_j,             |.| <= r ||u_s||_*
    varying query: sqrt(d_h) (s_j - s0_j) = delta_i.(W_Q k0_j) + delta_j.(W_K q0) + delta_i W_Q W_K^T delta_j^T,
                   |.| <= r ||W_Q k0_j||_* + r ||W_K q0||_* + r^2 beta   (beta: `HeadEnclosure.bilinear_bound`;
                   linf: with the stored scalings s, t of the row, which must be positive finite vectors of length
                   d: any such pair gives a valid bound, so a forged pair can only loosen it)
    values:        w_j - w0_j = u_w.delta_j,             |.| <= r ||u_w||_*

so the check is l_j <= s0_j - (reach), u_j >= s0_j + (reach), W_j >= w0_j + r ||u_w||_* on the balls' ends.
"""
from __future__ import annotations

import math

import numpy as np
from flint import arb

from attncert.audit.head_enclosure import SCALING_FIELDS, HeadEnclosure, scaling_defect


def first_order_scalings(fo: dict | None) -> tuple | None:
    """The stored (scale_q, scale_k) of a row's first_order part, or None when either is missing."""
    if fo is None or any(k not in fo for k in SCALING_FIELDS):
        return None
    return tuple(np.asarray(fo[k]) for k in SCALING_FIELDS)


def enclosure_margin(head: HeadEnclosure, l: np.ndarray, u: np.ndarray, W: np.ndarray, radius: float, norm: str,
                     mode: str, scalings: tuple | None = None) -> tuple[float, str]:
    """Smallest margin (>= 0: the stored intervals enclose the exact ranges) and where. scalings: the row's stored
    (scale_q, scale_k) (`first_order_scalings`), required for a linf varying query (-inf and why, if not valid)."""
    r = arb(radius)
    if mode == "fixed":
        reach = [r * head.exact_norm("u_s", norm)] * head.n
    else:
        if norm == "linf":
            why = scaling_defect(scalings, head.W_Q.shape[0])
            if why:
                return -math.inf, why
        kq = head.key_query_norms(norm)
        qk = head.exact_norm("u_s", norm) * head.sqrt_dh  # ||W_K q0||_* = sqrt(d_h) ||u_s||_*
        beta = head.bilinear_bound(norm, scalings if norm == "linf" else None)
        reach = [(r * a + r * qk + r * r * beta) / head.sqrt_dh for a in kq]
    wreach = r * head.exact_norm("u_w", norm)
    worst, where = math.inf, ""
    for j in range(head.n):
        for label, m in ((f"score lower end, token {j}", (head.s0[j] - reach[j]) - arb(float(l[j]))),
                         (f"score upper end, token {j}", arb(float(u[j])) - (head.s0[j] + reach[j])),
                         (f"value bound, token {j}", arb(float(W[j])) - (head.w0[j] + wreach))):
            lower = float(m.lower())
            if lower < worst:
                worst, where = lower, label
    return worst, where


def lp_margin(l: np.ndarray, u: np.ndarray, W: np.ndarray, value: float) -> float:
    """-F1(value) / sum_j e^{s_j} at its lower end (>= 0: value bounds the greedy LP), in units of e^{max u}."""
    if not math.isfinite(value):
        return -math.inf
    top = float(np.max(u))
    U = arb(value)
    total, weight = arb(0), arb(0)
    for lj, uj, Wj in zip(l.tolist(), u.tolist(), W.tolist()):
        diff = arb(Wj) - U
        s = uj if Wj > value else lj
        e = (arb(s) - top).exp()
        total += e * diff
        weight += e
    return float((-total / weight).lower())
