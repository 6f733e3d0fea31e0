"""The block table's certificates (issue 32): every reported bound of `data/block/{model}/units.csv` re-checked from
what `block/certificate.py` stored beside it (`transition{L}_certificates.npz`), in numpy, without the stage's code.

The certificate's claim, per (transition, head), sense s = +-1 and radius r (docs/block_residual.md, the
certificate module): with y the SDP dual, H0 the centre Hessian, c / J the enclosure's centre value and gradient
(c within e0, J within a0 of the exact ones), g0 / G the stage's float value and gradient, Dev_k the remainder's
bound on piece k of [0, 1] (weights w_k = int (1 - t) dt over the piece), and r' >= r,

    max s f <= max(s (c - g0) + e0, 0) + (||J - G||_1 + a0) r' + r'^2 [1/2 sum y + sum_k w_k Dev_k]
    max s g <= s c + e0 + a0 r' + ||J||_1 r' + r'^2 [1/2 sum y + sum_k w_k Dev_k]

provided diag(y) - s H0 is positive definite. Checks, in order, per reported number:

* pieces: the stored bounds that must be nonnegative are (y, Dev, e0, a0), and the arrays have their shapes;
* dual_pd: diag(y) - s H0 positive definite, proved by a float Cholesky of diag(y) - s H0 - c I with Rump's shift
  c = 2 gamma_{n+2} / (1 - gamma_{n+2}) tr(diag(y) - s H0) (Rump 2006, "Verification of positive definiteness");
* sum: the right-hand side above evaluated in float64 with every operation's rounding bounded (gamma_k), so an upper
  bound of its exact value (w_k recomputed from the number of pieces, ||J - G||_1 and ||J||_1 from the stored
  vectors); the table's `second_order_certificate_*` must be at least that;
* reported: the table's `certificate_*` must equal its second-order bound where `certificate_*_source` says
  `second_order`. Where it says `crown`, the number is CROWN's, which keeps no certificate: listed as not covered.

Not re-derived here: H0, c, J, e0, a0 and Dev from the weights (the enclosures through the block); the audit checks
the dual's validity and the arithmetic that turns them into the reported bound.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from attncert.head.rounding import UNIT_ROUNDOFF as U
from attncert.head.rounding import gamma
from attncert.integrity.intermediate_check import verify_intermediate

NUMBERS = ("f", "g", "f_neg", "g_neg")
CROWN_REASON = "block stage: this row reports CROWN's bound (smaller or the certificate not finite); no certificate"
TINY = 1e-300


def _up(x, k: int):
    """An upper bound of the exact value of a nonnegative float expression of k rounded operations."""
    return x * (1.0 + gamma(k + 1)) + TINY


def _add_up(a, b):
    """An upper bound of a + b for floats of any sign."""
    s = a + b
    return s + U * np.abs(s) + TINY


def hessian_from_triu(H0_triu: np.ndarray) -> np.ndarray:
    n = H0_triu.shape[-1]
    d = (math.isqrt(8 * n + 1) - 1) // 2
    iu = np.triu_indices(d)
    H = np.zeros(H0_triu.shape[:-1] + (d, d))
    H[:, iu[0], iu[1]] = H0_triu
    H[:, iu[1], iu[0]] = H0_triu
    return H


def proved_positive_definite(A: np.ndarray) -> bool:
    """A (n, n) symmetric float matrix proved positive definite: Cholesky of A - c I succeeds (Rump's shift)."""
    n = A.shape[-1]
    if not np.isfinite(A).all():
        return False
    g = gamma(n + 2)
    c = 2.0 * (g / (1.0 - g)) * np.abs(np.diagonal(A)).sum() * (1 + 1e-6) + 1e-280
    try:
        np.linalg.cholesky(A - c * np.eye(n))
    except np.linalg.LinAlgError:
        return False
    return True


def integration_weights_up(K: int) -> np.ndarray:
    """Upper bounds of w_k = int_{k/K}^{(k+1)/K} (1 - t) dt = (2K - 2k - 1) / (2 K^2)."""
    k = np.arange(K, dtype=np.float64)
    return _up((2 * K - 2 * k - 1) / (2.0 * K * K), 3)


def recomputed_bounds(z) -> dict:
    """(m, R) upper bounds of each number's right-hand side from one transition's stored pieces, (m,) dual checks
    per sense, and (m,) piece checks."""
    radii = np.asarray(z["radii"], dtype=np.float64)
    J, G, g0, c = (np.asarray(z[k], dtype=np.float64) for k in ("J", "G", "g0", "c"))
    e0, a0, dev = (np.asarray(z[k], dtype=np.float64) for k in ("e0", "a0", "dev"))
    H0 = hessian_from_triu(np.asarray(z["H0_triu"], dtype=np.float64))
    m, d = J.shape
    R, K = len(radii), int(z["pieces"])
    ok = (dev.shape == (R, K, m)) & (H0.shape == (m, d, d)) & (G.shape == (m, d))
    # negative pieces would lower the bound; NaN / +inf ones (an enclosure that gave up) only make it not finite
    ok = np.full(m, bool(ok)) & ~(e0 < 0) & ~(a0 < 0) & ~(dev < 0).any(axis=(0, 1))
    r_up = radii * (1 + 4 * U)                                  # >= r after its one rounding
    r2 = _up(r_up * r_up, 1)
    w = integration_weights_up(K)
    rem = _up(np.einsum("rkm,k->mr", dev, w) * r2[None, :], K + 1)            # (m, R)
    off_grad = _up(np.abs(J - G).sum(-1), 2 * d)
    grad_l1 = _up(np.abs(J).sum(-1), d)
    out = {"pieces": ok}
    for sense, sign, suffix in (("pos", 1.0, ""), ("neg", -1.0, "_neg")):
        y = np.asarray(z[f"y_{sense}"], dtype=np.float64)
        ok_y = (y.shape == (m, d)) and bool(np.isfinite(y).all())
        out[f"pd{suffix}"] = np.array([ok_y and bool((y[h] >= 0).all())
                                       and proved_positive_definite(np.diag(y[h]) - sign * H0[h]) for h in range(m)])
        quad = _up(_up(0.5 * y.sum(-1), d)[:, None] * r2[None, :], 1)         # (m, R)
        off = _add_up(sign * c, -sign * g0)                                   # >= s (c - g0)
        base = np.maximum(_add_up(off, _up(e0, 0)), 0.0)[:, None]
        lin = _up((off_grad + a0)[:, None] * r_up[None, :], 2)
        out[f"f{suffix}"] = _up(base + lin + quad + rem, 3)
        inner = _up(e0[:, None] + a0[:, None] * r_up[None, :] + grad_l1[:, None] * r_up[None, :] + quad + rem, 6)
        out[f"g{suffix}"] = _add_up(sign * c[:, None], inner)
    return out


def _record(L, r: int, row: dict, number: str, status: str, check: str, reason: str, reported=math.nan,
            margin=math.nan) -> dict:
    return {"table": "block", "layer": L, "row": r, "head": row.get("head", ""), "prompt": row.get("prompt", ""),
            "query_pos": row.get("position", ""), "radius": row.get("radius", ""), "norm": "linf", "mode": "",
            "length": "", "number": number, "reported": reported, "status": status, "check": check,
            "margin": -math.inf if status == "fail" and not np.isfinite(margin) else margin, "reason": reason,
            "margins": ""}


def _float(text) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        return math.nan


def _source_column(k: str) -> str:
    return "certificate_source" if k == "f" else f"certificate_{k}_source"


def _load(root: Path, model: str, L: int):
    npz = root / "block" / model / f"transition{L}_certificates.npz"
    if not npz.exists():
        return None
    with np.load(verify_intermediate(npz), allow_pickle=False) as z:
        return recomputed_bounds(z), [int(h) for h in z["heads"]], [float(x) for x in z["radii"]]


def audit_block(root: Path, model: str) -> list[dict]:
    """One record per (row, reported number) of the block table: pass, fail (check) or not covered. A table
    without the certificate's columns (written before it existed) gives no record."""
    path = root / "block" / model / "units.csv"
    if not path.exists():
        return []
    with open(verify_intermediate(path), newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or "certificate_source" not in rows[0]:
        return []
    cache: dict = {}
    out = []
    for r, row in enumerate(rows):
        L = int(row["transition"])
        if L not in cache:
            cache[L] = _load(root, model, L)
        for k in NUMBERS:
            number = f"certificate_{k}"
            reported = _float(row.get(number, ""))
            source = str(row.get(_source_column(k), "")).strip()
            if source == "crown":
                out.append(_record(L, r, row, number, "not covered", "no_certificate", CROWN_REASON, reported))
                continue
            if cache[L] is None:
                out.append(_record(L, r, row, number, "fail", "certificate_file",
                                   f"no transition{L}_certificates.npz beside units.csv", reported))
                continue
            rec, heads, radii = cache[L]
            try:
                h = heads.index(int(row["head"]))
                ri = next(i for i, x in enumerate(radii) if math.isclose(x, float(row["radius"]), rel_tol=1e-12))
            except (ValueError, StopIteration):
                out.append(_record(L, r, row, number, "fail", "unit", "head or radius not in the certificate file",
                                   reported))
                continue
            suffix = "_neg" if k.endswith("_neg") else ""
            second = _float(row.get(f"second_order_{number}", ""))
            bound = float(rec[k][h, ri])
            if not bool(rec["pieces"][h]):
                out.append(_record(L, r, row, number, "fail", "pieces", "a stored bound is negative or an array "
                                   "has the wrong shape", reported))
            elif not bool(rec[f"pd{suffix}"][h]):
                out.append(_record(L, r, row, number, "fail", "dual_pd", "diag(y) - H0 not proved positive definite",
                                   reported))
            elif not (np.isfinite(bound) and second >= bound):
                out.append(_record(L, r, row, number, "fail", "sum", f"second-order bound {second!r} below the sum "
                                   f"of its stored pieces {bound!r}", reported, margin=second - bound))
            elif source != "second_order" or not reported == second:
                out.append(_record(L, r, row, number, "fail", "reported", f"reported {reported!r} is not the "
                                   f"second-order bound {second!r} (source {source!r})", reported))
            else:
                out.append(_record(L, r, row, number, "pass", "pieces+dual_pd+sum+reported", "", reported,
                                   margin=second - bound))
    return out
