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
        m = _linf_margins(Z, head.Z0, radius)
        a, b = np.unravel_index(int(np.argmin(m)), m.shape)
        exact = float((r - abs(arb(float(Z[a, b])) - arb(float(head.Z0[a, b])))).lower())
        # every entry's margin has its exact sign (`_linf_margins`): a negative one is never reported as >= 0
        return exact if float(np.min(m)) >= 0 else min(exact, float(np.min(m)), -1e-300)
    margins = []
    for j in range(Z.shape[0]):
        sq = sum(((arb(float(a)) - arb(float(b))) ** 2 for a, b in zip(Z[j], head.Z0[j])), arb(0))
        margins.append(float((r * r - sq).lower()))
    return min(margins)


def _linf_margins(Z: np.ndarray, Z0: np.ndarray, radius: float) -> np.ndarray:
    """Per entry r - |Z - Z0| in float64, with the sign of the exact margin.

    The exact difference is s + e with s = fl(Z - Z0) and e its rounding error, computed exactly (Knuth's TwoSum);
    e has the sign-independent size |e| <= u |s|, so |Z - Z0| = sgn(s) (s + e). For r/2 <= |s| <= 2r, r - |s| is
    exact (Sterbenz) and fl((r - |s|) - sgn(s) e) has the sign of the exact margin (rounding keeps signs and
    zero); |s| < r/2 gives a margin above r/2 - u r, |s| > 2r one below -r."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = Z - Z0
        bp = s - Z
        e = (Z - (s - bp)) + (-Z0 - bp)
        a = np.abs(s)
        m = (radius - a) - np.sign(s) * e
        m = np.where(a < 0.5 * radius, radius - a, m)
        return np.where(a > 2.0 * radius, -a, m)


def value_margin(head: HeadEnclosure, Z: np.ndarray, exact_lo: float) -> float:
    """g(Z) - exact_lo at the ball's lower end (>= 0: the witness attains exact_lo)."""
    return float((head.value(Z, "fixed") - arb(exact_lo)).lower())
