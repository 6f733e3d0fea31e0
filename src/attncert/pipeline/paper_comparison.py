"""Paper vs reproduced: every claimed number beside ours, and whether they agree.

The papers' numbers live in `data/paper_claims.yaml` (each with the sentence it comes from and the
sense in which a reproduction agrees). Each stage writes `figures/tables/{model}/{stage}_measured.json`
mapping claim ids to our measured values; `comparison_table` joins the two.

Agreement kinds (`agree.kind` in the claims file):
    range   lo <= ours <= hi (for a pair of ours, both ends)
    order   |log10(ours / paper)| <= log10(factor) (same order of magnitude, within the factor)
    sign    the qualitative claim holds (ours is a boolean computed by the stage)
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml


def _scalar(v):
    if isinstance(v, dict):
        return v.get("median")
    if isinstance(v, (list, tuple)):
        vals = [x for x in v if isinstance(x, (int, float))]
        return float(np.median(vals)) if vals else None
    return v


def agrees(claim: dict, ours) -> str:
    """'yes', 'no', or 'n/a' (no measurement)."""
    if ours is None or (isinstance(ours, float) and math.isnan(ours)):
        return "n/a"
    rule = claim.get("agree", {})
    kind = rule.get("kind")
    if kind == "sign":
        return "yes" if bool(ours) else "no"
    values = ours if isinstance(ours, (list, tuple)) else [_scalar(ours)]
    values = [float(v) for v in values if v is not None and np.isfinite(float(v))]
    if not values:
        return "n/a"
    if kind == "range":
        lo, hi = float(rule["lo"]), float(rule["hi"])
        return "yes" if all(lo <= v <= hi for v in values) else "no"
    if kind == "order":
        paper = _scalar(claim["value"])
        if paper is None or paper <= 0 or any(v <= 0 for v in values):
            return "n/a"
        return "yes" if all(abs(math.log10(v / paper)) <= math.log10(float(rule["factor"])) for v in values) else "no"
    return "n/a"


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return "–".join(_fmt(x) for x in v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.3g}"
    return str(v)


def load_claims(claims_file: str | Path, paper: str) -> list[dict]:
    """The claims of one paper ("paper_a" or "paper_b") from the claims file."""
    return yaml.safe_load(Path(claims_file).read_text())[paper]["claims"]


def load_measured(paths) -> dict:
    """Merge the stages' measured JSON files: {claim_id: {"value": ..., "grid": ...}}."""
    out = {}
    for p in paths:
        rec = json.loads(Path(p).read_text())
        for cid, value in rec["values"].items():
            out[cid] = {"value": value, "grid": rec["grid"]}
    return out


def comparison_table(claims_file: str | Path, measured: dict) -> pd.DataFrame:
    claims = yaml.safe_load(Path(claims_file).read_text())
    rows = []
    for paper_key in ("paper_a", "paper_b"):
        section = claims[paper_key]
        for claim in section["claims"]:
            m = measured.get(claim["id"], {})
            ours = m.get("value")
            rows.append({"paper": "A" if paper_key == "paper_a" else "B", "id": claim["id"], "quantity": claim["unit"],
                         "paper value": _fmt(claim["value"]), "paper grid": section["grid"]["model"],
                         "ours": _fmt(ours), "our grid": m.get("grid", "not measured in this run"),
                         "agree": agrees(claim, ours), "sentence": claim["sentence"]})
    return pd.DataFrame(rows)


def write_measured(path: str | Path, values: dict, grid: str) -> None:
    from attncert.pipeline.provenance import write_json

    clean = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in values.items()}
    write_json(path, {"grid": grid, "values": clean})
