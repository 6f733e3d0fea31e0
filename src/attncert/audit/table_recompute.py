"""The summary tables under `figures/tables/{model}/`, recomputed from the run's row tables and compared number by
number (`audit_summary_tables`).

Every number of a summary table that aggregates certified rows is recomputed from the row tables alone
(`data/certify/{model}/layer*.csv`, `data/long_context/{model}/units.csv`, `data/block/{model}/units.csv`, and
`data/baselines/{model}/layer*.csv` where a table puts the baselines beside the certificate), with the functions
that wrote the table (pure: pandas, numpy, scipy.stats; `stage_tables_expected`), never reading the summary file
to recompute it. Then the paper comparison from the recomputed measured values, and the README's results when the
committed reference run is this run (`paper_tables_expected`). Tolerances: `table_compare`.

Records have the keys of `table_coverage._row_record`, `check` "tables", `table` the summary file's name: per CSV
column, per measured key and per Markdown file one "pass" record, or one "fail" per differing number (its row, the
stored and the recomputed value), per missing, extra or repeated row, per missing file; "not applicable" (with the
reason) for a stage without row tables and for a README rendered from another run.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from attncert.audit import paper_tables_expected as paper
from attncert.audit import stage_tables_expected as stages
from attncert.audit.table_compare import compare_frame, compare_text, compare_values, stored_file, table_record


def audit_summary_tables(data_root: Path, tables_root: Path, model: str, config: dict | None = None,
                         repo_root: Path | None = None) -> list[dict]:
    """Audit records of every summary table of `model` (`tables_root/{model}/*`, `tables_root` being
    `figures/tables`) against its recomputation from `data_root`'s row tables; `config`: the run's configuration
    (its `block` section; default: the one the block rows' sidecars record); `repo_root`: where README.md and
    docs/results.md are (default: `data_root`'s parent)."""
    data_root, tables_root = Path(data_root), Path(tables_root)
    repo_root = Path(repo_root) if repo_root else data_root.parent
    claims = data_root / "paper_claims.yaml"
    recomputed, records, label = recompute_stages(data_root, model, claims, config)
    for stage in recomputed:
        for expected in stage.files:
            records += compare_file(tables_root / model / expected.name, expected, stage.sources)
    if any(s.stage == "certify" for s in recomputed):
        records += paper_records(data_root, tables_root, model, claims, recomputed, label, repo_root,
                                 paper.other_measured_paths(tables_root, model, config))
    return records


def recompute_stages(data_root: Path, model: str, claims: Path, config: dict | None):
    """(the stages recomputed from their row tables, records of stages without row tables or unreadable ones, the
    model's label)."""
    certify = stages.layer_tables(data_root / "certify" / model)
    base = stages.layer_tables(data_root / "baselines" / model)
    block_units, lc_units = data_root / "block" / model / "units.csv", data_root / "long_context" / model / "units.csv"
    label = stages.model_label(certify[0], model) if certify else model
    plan = [("certify", bool(certify), lambda: stages.certification(certify, label)),
            ("baselines", bool(base and certify), lambda: stages.baselines(base, certify, label)),
            ("block", block_units.is_file(),
             lambda: stages.block(block_units, block_config(data_root, model, config), claims)),
            ("long_context", lc_units.is_file(), lambda: stages.long_context(lc_units, label))]
    done, records = [], []
    for name, present, build in plan:
        if not present:
            records.append(table_record(f"{name} tables", "file", "not applicable",
                                        f"no row tables of the {name} stage under {data_root}: not in this run"))
            continue
        try:
            done.append(build())
        except Exception as e:  # noqa: BLE001 - a malformed row table fails its stage's tables, never the audit
            records.append(table_record(f"{name} tables", "file", "fail",
                                        f"cannot recompute from the row tables: {type(e).__name__}: {e}"))
    return done, records, label


def block_config(data_root: Path, model: str, config: dict | None) -> dict:
    """The `block` section of the configuration: given, or as every block row table's sidecar records it."""
    if config and "block" in config:
        return config["block"]
    found = {json.dumps(json.loads(p.read_text(encoding="utf-8"))["params"]["block"], sort_keys=True)
             for p in sorted((data_root / "block" / model).glob("transition*.csv.json"))}
    if len(found) != 1:
        raise ValueError(f"the block rows' sidecars record {len(found)} block configurations; pass the configuration")
    return json.loads(found.pop())


def compare_file(path: Path, expected: stages.Expected, sources: str) -> list[dict]:
    """The stored file against its recomputation (missing file or sidecar mismatch: fail)."""
    found, records = stored_file(path, expected.name)
    if found is None:
        return records
    if expected.kind == "csv":
        try:
            stored = pd.read_csv(found)
        except (ValueError, pd.errors.ParserError) as e:
            return [table_record(expected.name, "file", "fail", f"unreadable CSV: {e}")]
        return compare_frame(expected.name, stored, expected.value, list(expected.keys), sources)
    text = found.read_text(encoding="utf-8")
    if expected.kind == "text":
        return compare_text(expected.name, text, expected.value, sources)
    try:
        stored = json.loads(text)
    except ValueError as e:
        return [table_record(expected.name, "file", "fail", f"unreadable JSON: {e}")]
    if isinstance(stored, dict):
        stored = {k: v for k, v in stored.items() if k in expected.value}  # e.g. a snapshot's provenance
    return compare_values(expected.name, stored, expected.value, "", sources)


def paper_records(data_root: Path, tables_root: Path, model: str, claims: Path, recomputed, label: str,
                  repo_root: Path, other: list[Path]) -> list[dict]:
    """paper_vs_reproduced.{csv,md,json} from the recomputed measured values and the stored `other` measured files;
    the README's results."""
    measured = paper.joined_measured({s.stage: s.measured for s in recomputed}, other)
    sources = (f"the measured values recomputed from the row tables ({', '.join(s.stage for s in recomputed)}) and "
               f"the stored {', '.join(paper.OTHER_MEASURED)}")
    records = []
    for expected in paper.paper_vs_reproduced(measured, claims, label):
        records += compare_file(tables_root / model / expected.name, expected, sources)
    snapshot = tables_root / model / "paper_vs_reproduced.json"
    readme, results = repo_root / "README.md", repo_root / "docs" / "results.md"
    for name, text, reason in paper.readme_records(snapshot, data_root / "reference_run.json", readme, results,
                                                   measured, claims, label):
        if text is None:
            records.append(paper.not_applicable(name, reason))
            continue
        path = readme if name == readme.name else results
        if not path.is_file():
            records.append(table_record(name, "file", "fail", f"{path} is missing"))
            continue
        stored = paper.readme_block(path) if path == readme else path.read_text(encoding="utf-8")
        records += ([table_record(name, "text", "fail", f"{path}: the results markers are not there once each")]
                    if stored is None else compare_text(name, stored, text, f"{sources}, {reason}"))
    return records
