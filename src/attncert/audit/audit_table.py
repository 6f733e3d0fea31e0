"""The audit of a model's certified numbers, and the `attncert audit` command.

For every layer: `data/certify/{model}/layer{L}.csv` (the numbers), `layer{L}_certificates.npz` (what certifies
them), `layer{L}_spec.npz` and `data/extract/{model}/layer{L}.npz` (what defines the unit). Each file is checked
against the sha256 in its sidecar first (`integrity.intermediate_check`: one line naming the file and the command
that regenerates it); a certificate file that does not read as one stops the audit the same way. Writes one
row per (table row, number): pass, fail (with the check and its margin), not applicable (an empty cell by
configuration) or not covered (a table whose numbers have no stored certificate, with the reason).

The units the configuration defines (`table_coverage.expected_units`) must all be in the table, once each, and
nothing else: a missing, duplicated or foreign row fails. The configuration is the run's recorded one
(`run_configuration`, data/run/{model}/config.yaml) unless --configfile names another. The long-context table is
audited the same way from its token arrays and the configuration's `long_context` grid (`long_context_audit`); the
block table's certificates are re-derived from the weights (`block_audit`); the extracted arrays are compared with
the checkpoint (`model_weights`); the summary tables are recomputed from the row tables (`table_recompute`).

    attncert audit --model all-MiniLM-L6-v2 [--configfile FILE ...] [--layer 0 ...] [--rows 0-9,17] [--out PREFIX]
                   [--part certificates|weights|tables ...]
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
import zipfile
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from attncert.audit.row_audit import NUMBERS, Expect, Outcome
from attncert.audit.certificate_pieces import block_transitions, certificate_parts, part_stage
from attncert.audit.run_configuration import RunConfigurationError, read_run_configuration, run_configuration_path
from attncert.audit.table_coverage import (AuditInputError, CoverageConfig, block_records, completeness_records,
                                           read_grid_config)
from attncert.integrity.intermediate_check import IntermediateError, regenerate_command, verify_intermediate

# Each part's modules are imported where the part runs (one job audits one piece: the block table's needs neither
# cvxpy nor pandas): head_enclosure, row_audit.audit_row and the certificate format (certification layers),
# long_context_audit, block_audit, model_weights (weights) and table_recompute (summary tables).

UNIT_COLUMNS = ["layer", "head", "prompt", "query_pos", "radius", "norm", "mode"]
COLUMNS = [
    "table",
    "layer",
    "row",
    *UNIT_COLUMNS[1:],
    "length",
    "number",
    "reported",
    "status",
    "check",
    "margin",
    "reason",
    "margins",
]
STATUSES = ("pass", "fail", "not applicable", "not covered")
#: the legend of audit.md's table: its columns in words
LEGEND = [
    "**part**: the row table a number belongs to (certify: the certification units, long_context, block), the "
    "extracted weights, or the summary tables",
    "**audited number**: a certified column of the row table (e.g. second_order, the second-order certificate), a "
    "weight array, or a summary file (every column, value and row of it)",
    "**pass**: rows re-derived from the stored certificate (or recomputed) and found equal within the check's margin",
    "**fail**: rows whose check failed (listed below)",
    "**not applicable**: empty by configuration (e.g. no exact value for a varying query)",
    "**not covered**: present but not audited, with the reason below",
]
BASELINE_NOTE = ("Baseline rows (IBP, CROWN, alpha-CROWN and their variants, `data/baselines/`) carry no certificate "
                 "of this kind: their bounds come from bound propagation in floating point, without a dual that a "
                 "checker could confirm. They are not audited.")
#: what reading a damaged certificate file can raise (zip, npy or json structure; shapes and ids are validated)
MALFORMED = (zipfile.BadZipFile, ValueError, KeyError, IndexError, TypeError, EOFError, OSError)


def parse_rows(spec: str | None) -> set[int] | None:
    """'0-9,17' -> {0..9, 17}; None -> all rows. A malformed or empty selection raises AuditInputError."""
    if spec is None:
        return None
    if not spec.strip():
        raise AuditInputError("--rows '' selects no row; fix: use e.g. --rows 0-9,17, or leave --rows out for all rows")
    out: set[int] = set()
    for part in spec.split(","):
        a, dash, b = part.strip().partition("-")
        try:
            lo, hi = int(a), int(b) if dash else int(a)
        except ValueError:
            raise AuditInputError(f"--rows {spec!r}: {part.strip()!r} is not a row or a range; fix: use e.g. "
                                  "--rows 0-9,17") from None
        if lo < 0 or hi < lo:
            raise AuditInputError(f"--rows {spec!r}: {part.strip()!r} is not an increasing range of rows >= 0; "
                                  "fix: use e.g. --rows 0-9,17")
        out.update(range(lo, hi + 1))
    return out


def _damaged(path: Path, e: Exception) -> IntermediateError:
    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    return IntermediateError(" ".join(f"{path} does not read as a certificate file ({type(e).__name__}: {msg}): "
                                      f"regenerate it with: {regenerate_command(path)}".split()))


def _record(layer: int, r: int, row: dict, o: Outcome) -> dict:
    return {"table": "certify", "layer": layer, "row": r, **{k: row.get(k, "") for k in UNIT_COLUMNS[1:]}, "length": "",
            **asdict(o)}


def audit_layer(root: Path, model: str, layer: int, rows: set[int] | None = None,
                coverage: CoverageConfig | None = None) -> list[dict]:
    """Every number of the layer's table (rows: a selection; coverage: the configured grid, checked complete)."""
    from attncert.audit.head_enclosure import LayerFiles
    from attncert.audit.row_audit import audit_row
    from attncert.certify.certificate_store import CertificateFile

    base = root / "certify" / model
    table = verify_intermediate(base / f"layer{layer}.csv")
    certs = verify_intermediate(base / f"layer{layer}_certificates.npz")
    files = LayerFiles(verify_intermediate(root / "extract" / model / f"layer{layer}.npz"),
                       verify_intermediate(base / f"layer{layer}_spec.npz"))
    with open(table, newline="") as fh:
        table_rows = list(csv.DictReader(fh))
    beyond = sorted(r for r in rows or () if r >= len(table_rows))
    if beyond:  # a selection is audited whole or not at all: a row it names that does not exist is an error
        raise AuditInputError(
            f"--rows selects row {beyond[0]}{' and more' if len(beyond) > 1 else ''}, but {table} has "
            f"{len(table_rows)} rows; fix: choose rows in 0-{len(table_rows) - 1}"
        )
    expect = coverage.expect if coverage else Expect()
    out = [] if coverage is None or rows is not None else completeness_records(table_rows, coverage, layer, files)
    try:
        store = CertificateFile(certs)
    except MALFORMED as e:
        raise _damaged(certs, e) from None
    with store:
        for r, row in enumerate(tqdm(table_rows, desc=f"audit layer {layer}", file=sys.stderr, mininterval=5)):
            if rows is not None and r not in rows:
                continue
            try:
                cert = store.row_with_programs(r)
                outcomes = audit_row(files, row, cert, expect)
            except (zipfile.BadZipFile, EOFError, OSError) as e:
                raise _damaged(certs, e) from None
            except MALFORMED as e:  # one row's certificate is malformed: that row fails, the audit goes on
                why = f"malformed certificate ({type(e).__name__}: {str(e)[:160]})"
                outcomes = [Outcome(k, math.nan, "fail", "certificate", -math.inf, why) for k in NUMBERS]
            out.extend(_record(layer, r, row, o) for o in outcomes)
    return out


ROW_TABLES = ("certify", "long_context", "block")


def _summary_key(r: dict) -> tuple[str, str]:
    """The summary's (table, number) of a record: a row table's number as is; the weights per array group; a
    summary table (check `tables`) as one line per file, whatever column or value of it the record is about."""
    if r["table"] in ROW_TABLES or r["table"] == "weights":
        return r["table"], r["number"]
    return "summary tables", r["table"]


STAGE_RULES = {"certify": "certify_layer", "baselines": "baselines_layer", "block": "block_transition",
               "long_context": "long_context_certify"}


def next_steps(fails: list[dict], model: str, grid: str = "{grid}") -> list[str]:
    """One command per damaged output the failing records point to (its target before `--forcerun`, which takes
    every later word as a rule name), in the order of first failure."""
    steps = []
    for r in fails:
        t = r["table"]
        if t == "certify":
            step = f"`snakemake --cores all data/certify/{model}/layer{r['layer']}.csv --forcerun certify_layer`"
        elif t == "long_context":
            step = f"`snakemake --cores all data/long_context/{model}/units.csv --forcerun long_context_certify`"
        elif t == "block":
            step = f"`snakemake --cores all data/block/{model}/units.csv --forcerun block_transition`"
        elif t == "weights" and str(r["layer"]).isdigit():
            step = f"`snakemake --cores all data/extract/{model}/layer{r['layer']}.npz --forcerun extract`"
        elif t == "weights":
            step = "the checkpoint on disk is not the run's: rerun the pipeline, `snakemake --cores all --forceall`"
        elif t in ("README.md", "results.md"):
            step = ("adopt this run as the reference run: `.venv/bin/python -m "
                    f"attncert.paper_comparison.readme_results figures/tables/{model}/paper_vs_reproduced.json`")
        elif t.endswith(" tables"):  # a stage's row tables could not be read back: that stage again
            rule = STAGE_RULES.get(t.removesuffix(" tables"), t.removesuffix(" tables"))
            step = f"`snakemake --cores all --forcerun {rule}`"
        else:
            folder = f"figures/tables/minip/{grid}" if t.startswith("minip_") else f"figures/tables/{model}"
            step = f"`snakemake --cores all --force {folder}/{t}`"
        if step not in steps:
            steps.append(step)
    return steps


def summary_markdown(records: list[dict], model: str, seconds: float, layers: list[int],
                     coverage: CoverageConfig | None = None, stage_seconds: dict | None = None) -> str:
    keyed = [(_summary_key(r), r) for r in records]
    by = Counter((k, r["status"]) for k, r in keyed)
    units = len({(r["layer"], r["row"]) for r in records if r["table"] == "certify" and r["number"] in NUMBERS})
    lc_units = len({r["row"] for r in records if r["table"] == "long_context" and r["number"] in NUMBERS})
    block_rows = len({r["row"] for r in records if r["table"] == "block" and r["number"].startswith("certificate_")})
    files = len({k for k, r in keyed if k[0] == "summary tables"})
    parts = f" ({', '.join(f'{k} {v:.1f} s' for k, v in stage_seconds.items())})" if stage_seconds else ""
    lines = [f"# Audit of the certified numbers: {model}", "",
             f"Model **{model}**, layers {', '.join(map(str, layers))}; {units} certification units, {lc_units} "
             f"long-context units{f', {block_rows} block rows' if block_rows else ''}"
             f"{f', {files} summary tables' if files else ''}. Every number re-derived "
             "from its stored certificate and the extracted weights in "
             f"ball arithmetic, without a solver; the weights compared with the checkpoint; every summary table "
             f"recomputed from the row tables (docs/audit.md). **Audit time {seconds:.1f} s**{parts}.", "",
             "The summary tables' line counts every column, value and row checked in that file.", "",
             "| part | audited number | " + " | ".join(STATUSES) + " |", "|---|---|" + "---|" * len(STATUSES)]
    order = {t: i for i, t in enumerate((*ROW_TABLES, "weights", "summary tables"))}
    keys = sorted({k for k, _ in keyed},
                  key=lambda k: (order.get(k[0], 9), k[0], (NUMBERS + (k[1],)).index(k[1]), k[1]))
    for t, k in keys:
        lines.append(f"| {t} | {k} | " + " | ".join(str(by[((t, k), s)]) for s in STATUSES) + " |")
    lines.append(
        "| **all** | | " + " | ".join(str(sum(1 for r in records if r["status"] == s)) for s in STATUSES) + " |"
    )
    lines += ["", "Columns:", ""] + [f"- {line}" for line in LEGEND]
    checks = Counter((*k, r["check"]) for k, r in keyed if r["status"] == "pass")
    if checks:
        lines += ["", "Passes per check:", ""]
        lines += [f"- {t} {k}: {c} — {n}" for (t, k, c), n in sorted(checks.items())]
    reasons = Counter((*k, r["status"], r["reason"]) for k, r in keyed
                      if r["status"] in ("not applicable", "not covered"))
    if reasons:
        lines += ["", "Not audited, and why:", ""]
        lines += [f"- {t} {k} ({s}): {why} — {n}" for (t, k, s, why), n in sorted(reasons.items())]
    fails = [r for r in records if r["status"] == "fail"]
    lines += ["", f"Failures: {len(fails)}."]
    if fails:
        per = Counter((r["check"], r["reason"][:80]) for r in fails)
        lines += ["", "| check | reason | count |", "|---|---|---|"]
        lines += [f"| {c} | {why} | {n} |" for (c, why), n in per.most_common()]
        lines += ["", "| table | layer | row | number | check | margin | reason |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['table']} | {r['layer']} | {r['row']} | {r['number']} | {r['check']} | {r['margin']:.3g} | "
                  f"{r['reason']} |" for r in fails[:50]]
    if coverage is None:
        lines += ["", "Completeness not checked: a row selection (`--rows`)."]
    if fails:
        lines += ["", "Next step: each failing row names its check ([docs/audit.md](../../../docs/audit.md) says what "
                  "each one proves). Regenerate what failed, then run the audit again:", ""]
        grid = ((coverage.config if coverage else {}).get("minip") or {}).get("name", "{grid}")
        lines += [f"- {step}" for step in next_steps(fails, model, grid)]
    lines += ["", BASELINE_NOTE, ""]
    return "\n".join(lines)


def write_audit(records: list[dict], csv_path: Path, md_path: Path, model: str, seconds: float, layers: list[int],
                coverage: CoverageConfig | None = None, stage_seconds: dict | None = None):
    from attncert.integrity.file_integrity import atomic_path

    write_records(records, csv_path)
    with atomic_path(md_path) as tmp:
        tmp.write_text(summary_markdown(records, model, seconds, layers, coverage, stage_seconds))


def read_records(path: Path) -> list[dict]:
    """Records written by `write_records` (the pipeline's certificate part), with their numbers as floats."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k in ("margin", "reported"):
            try:
                r[k] = float(r[k])
            except (TypeError, ValueError):
                r[k] = math.nan
    return rows


def write_records(records: list[dict], path: Path) -> None:
    from attncert.integrity.file_integrity import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(records)


def layers_on_disk(root: Path, model: str) -> list[int]:
    return sorted(int(p.stem[5:]) for p in (root / "certify" / model).glob("layer*.csv") if p.stem[5:].isdigit())


PARTS = ("certificates", "weights", "tables")


def audit_certificate_part(root: Path, model: str, part: str, rows: set[int] | None = None,
                           coverage: CoverageConfig | None = None) -> list[dict]:
    """The records of one piece of the certificates part (`certificate_parts`): a layer's table (`audit_layer`),
    the long-context table (`long_context_audit`), the block table's own checks with the rows of transitions the
    configuration does not name (`block`) or one configured transition's rows (`block{L}`; `block_audit`)."""
    from attncert.audit.block_audit import audit_block
    from attncert.audit.long_context_audit import audit_long_context

    if part == "long_context":
        return audit_long_context(root, model, coverage.long_context if coverage else None, MALFORMED, _damaged)
    block = coverage.block if coverage else None
    if part == "block":
        return block_records(root, model) + audit_block(root, model, block,
                                                        "table" if block_transitions(coverage) else "all")
    if part.startswith("block") and part[5:].isdigit() and int(part[5:]) in block_transitions(coverage):
        return audit_block(root, model, block, int(part[5:]))
    if part.startswith("layer") and part[5:].isdigit():
        return audit_layer(root, model, int(part[5:]), rows, coverage)
    raise AuditInputError(f"no certificate part {part!r}; fix: name one of layer<L>, long_context, block, block<L> "
                          "(L a block transition of the recorded configuration)")


def join_records(paths: list[str | Path], out: Path, fix=lambda path: "regenerate it") -> int:
    """Write the records files in `paths` (each written by `write_records`) as one, their rows in that order: the
    file `write_records` writes for all their records at once. Returns the rows; a file that is not a records
    file raises AuditInputError naming fix(path)."""
    import io

    from attncert.integrity.file_integrity import atomic_path

    header = io.StringIO()
    csv.DictWriter(header, fieldnames=COLUMNS).writeheader()
    header = header.getvalue()
    bodies, rows = [], 0
    for path in paths:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
        if not text.startswith(header):
            raise AuditInputError(f"{path} is not an audit records file (its header differs); fix: {fix(path)}")
        bodies.append(text[len(header):])
        rows += len(read_records(Path(path)))
    with atomic_path(out) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(header + "".join(bodies))
    return rows


def audit_model(root: Path, model: str, layers: list[int], rows: set[int] | None = None,
                coverage: CoverageConfig | None = None, stage_seconds: dict | None = None, parts=PARTS,
                tables_root: Path | None = None) -> list[dict]:
    """The audit of a run, in up to three parts:

    certificates  every layer's numbers, then the long-context table's (re-derived from the configuration's
                  long-context grid) and the block table's (re-derived from the weights);
    weights       the extracted arrays against the checkpoint's own weights and an independent forward pass
                  (`model_weights`);
    tables        every summary table under `tables_root/{model}/` recomputed from the row tables
                  (`table_recompute`).

    A row selection audits those rows only. stage_seconds: filled with the seconds each part took."""
    from attncert.audit.model_weights import audit_model_weights, prompts_of
    from attncert.audit.table_recompute import audit_summary_tables

    times = stage_seconds if stage_seconds is not None else {}
    records: list[dict] = []
    if "certificates" in parts:
        t0 = time.perf_counter()
        records += [rec for L in layers for rec in audit_certificate_part(root, model, f"layer{L}", rows, coverage)]
        times["certification tables"] = time.perf_counter() - t0
    if rows is not None:
        return records
    config = coverage.config if coverage is not None else {}
    base = Path(root).resolve().parent  # the run's folder: prompts, passage, figures/tables, README
    if "certificates" in parts:
        for part in certificate_parts([], block_transitions(coverage)):
            t0 = time.perf_counter()
            records += audit_certificate_part(root, model, part, coverage=coverage)
            times[part_stage(part)] = times.get(part_stage(part), 0.0) + time.perf_counter() - t0
    if "weights" in parts and config.get("model"):
        t0 = time.perf_counter()
        try:
            prompts = prompts_of(config, base)
        except (KeyError, OSError, ValueError):
            prompts = None  # the token ids are then not re-tokenized (said in their records)
        records += audit_model_weights(root, model, config["model"], layers, config.get("long_context"), prompts,
                                       base)
        times["weights"] = time.perf_counter() - t0
    if "tables" in parts and config:
        t0 = time.perf_counter()
        records += audit_summary_tables(root, Path(tables_root) if tables_root else base / "figures" / "tables",
                                        model, config, base)
        times["summary tables"] = time.perf_counter() - t0
    return records


def recorded_coverage(root: Path, model: str) -> CoverageConfig:
    """The grid of the run's recorded configuration (`run_configuration`)."""
    config = read_run_configuration(root, model)
    try:
        return CoverageConfig.from_config(config)
    except (KeyError, TypeError, ValueError) as e:
        raise AuditInputError(f"the recorded configuration of {model} has no usable grid ({type(e).__name__}: {e}); "
                              f"fix: regenerate it with: snakemake --cores all {run_configuration_path(root, model)}"
                              ) from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="attncert audit", description="Check every certified number from its stored "
                                 "certificate and the extracted weights, without a solver.")
    ap.add_argument("--model", required=True, help="model label, as in data/certify/{model}/")
    ap.add_argument("--configfile", action="append", help="the configuration file(s) to check the run against, in "
                    "Snakemake's order: every unit they define must be in the tables (default: the run's recorded "
                    "configuration, data/run/{model}/config.yaml)")
    ap.add_argument("--layer", type=int, action="append", help="layer(s) to audit (default: every layer on disk)")
    ap.add_argument("--rows", help="table rows to audit, e.g. 0-9,17 (default: all)")
    ap.add_argument("--data", default="data", help="the data folder (default: data)")
    ap.add_argument("--tables", help="the summary tables' folder (default: figures/tables beside the data folder)")
    ap.add_argument("--part", action="append", choices=PARTS, help="audit only this part (repeatable): "
                    "certificates (every certified number), weights (the extracted arrays against the checkpoint), "
                    "tables (the summary tables against the row tables); default: all three")
    ap.add_argument("--out", help="write {out}.csv and {out}.md (default: print the summary)")
    a = ap.parse_args(argv)
    root = Path(a.data)
    t0 = time.perf_counter()
    try:
        rows = parse_rows(a.rows)
        if not (root / "certify" / a.model).is_dir():
            layers = []
        else:
            coverage = (read_grid_config(a.configfile, a.model, root) if a.configfile
                        else recorded_coverage(root, a.model))
            layers = a.layer or (coverage.layers if coverage.layers else layers_on_disk(root, a.model))
        if not layers:
            raise AuditInputError(f"no certification tables under {root / 'certify' / a.model}; fix: run the pipeline "
                                  "for that model first (snakemake --cores all with the run's configuration, e.g. "
                                  "--configfile workflow/config/paper.yaml, or --config model_source=DIR), or pass "
                                  "--data and --model of a run")
        stage_seconds: dict = {}
        records = audit_model(root, a.model, layers, rows, coverage, stage_seconds, parts=tuple(a.part or PARTS),
                              tables_root=Path(a.tables) if a.tables else None)
        if not records:
            raise AuditInputError(f"the selection --rows {a.rows} holds no row of layer(s) {layers}; fix: choose rows "
                                  "that exist (each layer's table: data/certify/{model}/layer{L}.csv)")
    except (AuditInputError, IntermediateError, RunConfigurationError) as e:
        print(f"attncert audit: {e}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - t0
    checked = coverage if rows is None else None  # a row selection checks no completeness
    if a.out:
        write_audit(records, Path(a.out + ".csv"), Path(a.out + ".md"), a.model, seconds, layers, checked,
                    stage_seconds)
    print(summary_markdown(records, a.model, seconds, layers, checked, stage_seconds))
    return 1 if any(r["status"] == "fail" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
