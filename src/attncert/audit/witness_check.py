"""exact_lo from its witness: a perturbation inside the ball whose value is at least exact_lo.

The witness is Z = Z0 + delta (the float64 sum, as stored). It is feasible iff |Z_jk - Z0_jk| <= r for every
entry (linf) or ||Z_j - Z0_j||_2 <= r per token (l2), checked in ball arithmetic on the exact differences; its
value g(Z) (`HeadEnclosure.value`, fixed query) is enclosed in a ball, and exact_lo is certified when the
ball's lower end is >= exact_lo (then max g >= g(Z) >= exact_lo).
"""
from __future__ import annotations

import numpy as np
from flint import arb

from attncert.audit.head_enclosure import HeadEnclosure


def witness_tokens(head: HeadEnclosure, stored: dict) -> np.ndarray:
    if "witness" in stored:
        return np.asarray(stored["witness"], dtype=np.float64)
    return head.Z0 + np.asarray(stored["witness_delta"], dtype=np.float64)


def ball_margin(head: HeadEnclosure, Z: np.ndarray, radius: float, norm: str) -> float:
    """radius - (largest perturbation), at its lower end: >= 0 iff Z lies in the ball."""
    if Z.shape != head.Z0.shape or not np.all(np.isfinite(Z)):
        return -np.inf
    r = arb(radius)
    if norm == "linf":
        D = np.abs(Z - head.Z0)
        j, k = np.unravel_index(int(np.argmax(D)), D.shape)
        # the float difference may round; the exact one is enclosed by arb at PREC bits
        worst = max((abs(arb(float(Z[a, b])) - arb(float(head.Z0[a, b]))) for a, b in
                     zip(*np.nonzero(D >= D[j, k] * (1 - 1e-12)))), key=lambda x: float(x.upper()))
        return float((r - worst).lower())
    margins = []
    for j in range(Z.shape[0]):
        sq = sum(((arb(float(a)) - arb(float(b))) ** 2 for a, b in zip(Z[j], head.Z0[j])), arb(0))
        margins.append(float((r * r - sq).lower()))
    return min(margins)


def value_margin(head: HeadEnclosure, Z: np.ndarray, exact_lo: float) -> float:
    """g(Z) - exact_lo at the ball's lower end (>= 0: the witness attains exact_lo)."""
    return float((head.value(Z, "fixed") - arb(exact_lo)).lower())
