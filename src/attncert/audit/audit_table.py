"""The audit of a model's certification tables, and the `attncert audit` command.

For every layer: `data/certify/{model}/layer{L}.csv` (the numbers), `layer{L}_certificates.npz` (what certifies
them), `layer{L}_spec.npz` and `data/extract/{model}/layer{L}.npz` (what defines the unit). Each file is checked
against the sha256 in its sidecar first (`pipeline.intermediate_check`: one line naming the file and the command
that regenerates it). Writes one row per (table row, number): pass, fail (with the check
and its margin) or not certifiable by design (with the reason).

    attncert audit --model all-MiniLM-L6-v2 [--layer 0 ...] [--rows 0-9,17] [--out figures/tables/.../audit]
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from attncert.audit.head_enclosure import LayerFiles
from attncert.audit.row_audit import NUMBERS, audit_row
from attncert.certify.certificate_store import CertificateFile
from attncert.pipeline.intermediate_check import IntermediateError, verify_intermediate

UNIT_COLUMNS = ["layer", "head", "prompt", "query_pos", "radius", "norm", "mode"]
COLUMNS = ["layer", "row", *UNIT_COLUMNS[1:], "number", "reported", "status", "check", "margin", "reason"]
BASELINE_NOTE = ("Baseline rows (IBP, CROWN, alpha-CROWN and their variants, `data/baselines/`) carry no certificate "
                 "of this kind: their bounds come from auto_LiRPA in floating point, without a dual that a checker "
                 "could confirm. They are not audited.")


def parse_rows(spec: str | None) -> set[int] | None:
    """'0-9,17' -> {0..9, 17}; None -> all rows."""
    if not spec:
        return None
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.strip().partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def audit_layer(root: Path, model: str, layer: int, rows: set[int] | None = None) -> list[dict]:
    base = root / "certify" / model
    table = verify_intermediate(base / f"layer{layer}.csv")
    certs = verify_intermediate(base / f"layer{layer}_certificates.npz")
    files = LayerFiles(verify_intermediate(root / "extract" / model / f"layer{layer}.npz"),
                       verify_intermediate(base / f"layer{layer}_spec.npz"))
    with open(table, newline="") as fh:
        table_rows = list(csv.DictReader(fh))
    out = []
    with CertificateFile(certs) as store:
        for r, row in enumerate(tqdm(table_rows, desc=f"audit layer {layer}", file=sys.stderr, mininterval=5)):
            if rows is not None and r not in rows:
                continue
            cert = store.row(r)
            for name in ("second_order", "second_order_tight"):
                part = cert.get(name)
                if part is not None and "A_rows" in part:
                    part["A"] = store.matrix(part["A_rows"], part["A_shape"])
            for o in audit_row(files, row, cert):
                out.append({"layer": layer, "row": r, **{k: row[k] for k in UNIT_COLUMNS[1:]}, **asdict(o)})
    return out


def summary_markdown(records: list[dict], model: str, seconds: float, layers: list[int]) -> str:
    from collections import Counter

    by = Counter((r["number"], r["status"]) for r in records)
    statuses = ["pass", "fail", "not certifiable", "not applicable"]
    lines = [f"# Audit of the certification table: {model}", "",
             f"Model **{model}**, layers {', '.join(map(str, layers))}; {len({(r['layer'], r['row']) for r in records})} "
             f"units. Every number re-derived from its stored certificate in ball arithmetic, without a solver "
             f"(docs/audit.md). Audit time {seconds:.1f} s.", "",
             "| number | " + " | ".join(statuses) + " |", "|---|" + "---|" * len(statuses)]
    for k in NUMBERS:
        lines.append(f"| {k} | " + " | ".join(str(by[(k, s)]) for s in statuses) + " |")
    lines.append("| **all** | " + " | ".join(str(sum(by[(k, s)] for k in NUMBERS)) for s in statuses) + " |")
    reasons = Counter((r["number"], r["status"], r["reason"]) for r in records if r["status"] in ("not certifiable",
                                                                                                 "not applicable"))
    if reasons:
        lines += ["", "Not certified by design:", ""]
        lines += [f"- {k} ({s}): {why} — {n}" for (k, s, why), n in sorted(reasons.items())]
    fails = [r for r in records if r["status"] == "fail"]
    lines += ["", f"Failures: {len(fails)}."]
    if fails:
        lines += ["", "| layer | row | number | check | margin | reason |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['layer']} | {r['row']} | {r['number']} | {r['check']} | {r['margin']:.3g} | {r['reason']} |"
                  for r in fails[:50]]
    lines += ["", BASELINE_NOTE, ""]
    return "\n".join(lines)


def write_audit(records: list[dict], csv_path: Path, md_path: Path, model: str, seconds: float, layers: list[int]):
    from attncert.pipeline.file_integrity import atomic_path

    with atomic_path(csv_path) as tmp:
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(records)
    with atomic_path(md_path) as tmp:
        tmp.write_text(summary_markdown(records, model, seconds, layers))


def layers_on_disk(root: Path, model: str) -> list[int]:
    return sorted(int(p.stem[5:]) for p in (root / "certify" / model).glob("layer*.csv") if p.stem[5:].isdigit())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="attncert audit", description="Check every certified number of the "
                                 "certification table from its stored certificate, without a solver.")
    ap.add_argument("--model", required=True, help="model label, as in data/certify/{model}/")
    ap.add_argument("--layer", type=int, action="append", help="layer(s) to audit (default: every layer on disk)")
    ap.add_argument("--rows", help="table rows to audit, e.g. 0-9,17 (default: all)")
    ap.add_argument("--data", default="data", help="the data folder (default: data)")
    ap.add_argument("--out", help="write {out}.csv and {out}.md (default: print the summary)")
    a = ap.parse_args(argv)
    root = Path(a.data)
    layers = a.layer or layers_on_disk(root, a.model)
    if not layers:
        print(f"attncert audit: no tables under {root / 'certify' / a.model}; fix: run snakemake first",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        records = [rec for L in layers for rec in audit_layer(root, a.model, L, parse_rows(a.rows))]
    except IntermediateError as e:
        print(f"attncert audit: {e}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - t0
    if a.out:
        write_audit(records, Path(a.out + ".csv"), Path(a.out + ".md"), a.model, seconds, layers)
    print(summary_markdown(records, a.model, seconds, layers))
    return 1 if any(r["status"] == "fail" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
