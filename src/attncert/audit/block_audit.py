"""The block table's certificates (issue 32): every reported bound of `data/block/{model}/units.csv` re-checked from
what `block/certificate.py` stored beside it (`transition{L}_certificates.npz`).

Per (transition, head) and sense (+g, -g), checks, in order:

* dual_pd: diag(y) - s H0 is positive definite for the stored SDP dual y and centre Hessian H0 (s = +-1), proved
  again by a float Cholesky of diag(y) - s H0 - c I with Rump's shift (`certificate.verified_pd`); with it
  max over the box of 1/2 u^T (s H0) u <= 1/2 sum y;
* sum: the second-order bounds on max f and max g at every radius recomputed from the stored pieces (centre
  offsets and rounding, gradient enclosure, 1/2 sum y, the remainder's per-piece Dev values and the integration
  weights) with the certificate's own outward-rounded formula (`certificate.f_bound` / `g_bound`); the table's
  `second_order_certificate_*` must be at least that;
* reported: the table's `certificate_*` must equal its second-order bound where `certificate_*_source` says
  `second_order`. Where it says `crown`, the number is CROWN's, which keeps no certificate: listed as not covered.

Not re-derived here: H0, the centre values and the remainder's Dev values from the weights (the enclosures through
the block); the audit checks the arithmetic that turns them into the reported bound and the dual's validity.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import torch

from attncert.block.certificate import f_bound, g_bound, stored_hessian, verified_pd
from attncert.pipeline.intermediate_check import verify_intermediate

NUMBERS = ("f", "g", "f_neg", "g_neg")
CROWN_REASON = "block stage: this row reports CROWN's bound (smaller or the certificate not finite); no certificate"


def _source_column(k: str) -> str:
    return "certificate_source" if k == "f" else f"certificate_{k}_source"


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


def recomputed_bounds(z) -> dict:
    """(m, R) second-order bounds per number from one transition's stored pieces, and (m,) dual checks per sense."""
    t = {k: torch.as_tensor(np.asarray(z[k])) for k in z.files if k != "H0_triu"}
    t["H0"] = torch.as_tensor(stored_hessian(np.asarray(z["H0_triu"])))
    out = {}
    for sense, sign, suffix in (("pos", 1.0, ""), ("neg", -1.0, "_neg")):
        y = t[f"y_{sense}"]
        A = torch.diag_embed(y) - sign * t["H0"]
        out[f"pd{suffix}"] = (verified_pd(A) & torch.isfinite(y).all(-1)).numpy()
        kw = dict(sign=sign, radii=t["radii"], y=y, dev=t["dev"], weights=t["weights"], off_g0=t["off_g0"],
                  e0=t["e0"], a0=t["a0"], off_grad=t["off_grad"])
        out[f"f{suffix}"] = f_bound(**kw).numpy()
        out[f"g{suffix}"] = g_bound(c=t["c"], grad_l1=t["grad_l1"], **kw).numpy()
    return out


def audit_block(root: Path, model: str) -> list[dict]:
    """One record per (row, reported number) of the block table: pass, fail (check) or not covered."""
    path = root / "block" / model / "units.csv"
    if not path.exists():
        return []
    with open(verify_intermediate(path), newline="") as fh:
        rows = list(csv.DictReader(fh))
    cache: dict = {}
    out = []
    for r, row in enumerate(rows):
        L = int(row["transition"])
        if L not in cache:
            npz = root / "block" / model / f"transition{L}_certificates.npz"
            if not npz.exists():
                cache[L] = None
            else:
                with np.load(verify_intermediate(npz), allow_pickle=False) as z:
                    cache[L] = (recomputed_bounds(z), [int(h) for h in z["heads"]], [float(x) for x in z["radii"]])
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
            if not bool(rec[f"pd{suffix}"][h]):
                out.append(_record(L, r, row, number, "fail", "dual_pd", "diag(y) - H0 not proved positive definite",
                                   reported))
            elif not (np.isfinite(bound) and second >= bound):
                out.append(_record(L, r, row, number, "fail", "sum", f"second-order bound {second!r} below the sum "
                                   f"of its stored pieces {bound!r}", reported, margin=second - bound))
            elif source != "second_order" or not reported == second:
                out.append(_record(L, r, row, number, "fail", "reported", f"reported {reported!r} is not the "
                                   f"second-order bound {second!r} (source {source!r})", reported))
            else:
                out.append(_record(L, r, row, number, "pass", "", "", reported, margin=second - bound))
    return out
