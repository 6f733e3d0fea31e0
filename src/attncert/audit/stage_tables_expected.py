"""What each stage's summary tables must hold, recomputed from the run's row tables with the writers' own pure
functions (no torch, no solver): the file name, its kind (CSV table, measured-values JSON, Markdown) and content.

* certification (`data/certify/{model}/layer*.csv`, `certify.summary.stage_tables`): certification.csv,
  certification_slopes.csv, certification_vs_paper.csv, soundness_violations.csv, their Markdown twins,
  certify_measured.json;
* block (`data/block/{model}/units.csv`, `block.report.stage_tables`): block_summary, block_vs_paper,
  block_certificate (CSV and Markdown), block_measured.json;
* long context (`data/long_context/{model}/units.csv`, `certify.long_context_summary`): long_context.md,
  long_context_measured.json;
* baselines (`data/baselines/{model}/layer*.csv` beside the certification rows, `baselines.comparison.stage_report`):
  baselines.csv, baselines_slopes.csv, baselines_headline.csv (each holds the certificate's gap beside the
  baselines'), baselines.md, baselines_measured.json.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from attncert.audit.table_compare import as_json
from attncert.block import report as block_report
from attncert.baselines.comparison import stage_report as baselines_report
from attncert.certify import long_context_summary
from attncert.certify.summary import STAGE_TABLE_KEYS, stage_tables as certify_tables, table_markdown
from attncert.integrity.file_integrity import sidecar_path
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.paper_comparison.paper_comparison import claim_dicts, measured_record
from attncert.reporting.table_files import load_tables
from attncert.reporting.unit_tables import UNIT_KEYS


@dataclass
class Expected:
    """One summary file as the writer gives it: kind "csv" (a DataFrame, rows matched by `keys`), "json" or "text"."""
    name: str
    kind: str
    value: object
    keys: tuple = ()


@dataclass
class StageExpected:
    """A stage's expected files, the measured values it hands the paper comparison, and what they came from."""
    stage: str
    files: list[Expected]
    measured: dict
    sources: str


CERTIFY_FILES = {"table": "certification", "slopes": "certification_slopes", "paper": "certification_vs_paper",
                 "violations": "soundness_violations"}
CERTIFY_KEYS = {"table": ("mode", "radius"), "slopes": ("mode",), "paper": ("quantity",),
                "violations": (*UNIT_KEYS, "radius", "quantity")}
BLOCK_FILES = {"summary": "block_summary", "paper": "block_vs_paper", "certificate": "block_certificate"}
BLOCK_KEYS = {"summary": ("radius",), "paper": ("quantity",), "certificate": ("radius",)}
BASELINE_FILES = {"table": ("baselines", ("mode", "radius", "method")),
                  "slopes": ("baselines_slopes", ("mode", "method")), "headline": ("baselines_headline", ("method",))}


def layer_tables(folder: Path) -> list[Path]:
    """`layer{L}.csv` of a folder in the order of L (the rules' `expand` over the configured layers)."""
    found = [(int(m.group(1)), p) for p in folder.glob("layer*.csv") if (m := re.fullmatch(r"layer(\d+)\.csv", p.name))]
    return [p for _, p in sorted(found)]


def model_label(row_table: Path, model: str) -> str:
    """The model's label as the run's tables show it: the one the row table's sidecar records."""
    side = sidecar_path(row_table)
    try:
        return str(json.loads(side.read_text(encoding="utf-8")).get("model_label", model))
    except (OSError, ValueError):
        return model


def certification(paths: list[Path], label: str) -> StageExpected:
    grid, tables, measured = certify_tables(load_tables(paths), label)
    files = []
    for key in STAGE_TABLE_KEYS:
        frame, title = tables[key]
        files += [Expected(f"{CERTIFY_FILES[key]}.csv", "csv", frame, CERTIFY_KEYS[key]),
                  Expected(f"{CERTIFY_FILES[key]}.md", "text", table_markdown(key, frame, title))]
    files.append(Expected("certify_measured.json", "json", as_json(measured_record(measured, grid))))
    return StageExpected("certify", files, measured_record(measured, grid), _names(paths))


def block(units: Path, block_config: dict, claims: Path) -> StageExpected:
    grid, tables, measured = block_report.stage_tables(pd.read_csv(verify_intermediate(units)), block_config,
                                                       claim_dicts(claims, "paper_a"))
    files = []
    for key in block_report.STAGE_TABLE_KEYS:
        frame, title, notes = tables[key]
        files += [Expected(f"{BLOCK_FILES[key]}.csv", "csv", frame, BLOCK_KEYS[key]),
                  Expected(f"{BLOCK_FILES[key]}.md", "text", block_report.markdown_text(frame, title, notes))]
    files.append(Expected("block_measured.json", "json", as_json(measured_record(measured, grid))))
    return StageExpected("block", files, measured_record(measured, grid), f"{units} and {claims.name}")


def long_context(units: Path, label: str) -> StageExpected:
    df = pd.read_csv(verify_intermediate(units))
    table, measured = long_context_summary.summary(df)
    grid = long_context_summary.grid_label(df, label)
    files = [Expected("long_context.md", "text", long_context_summary.markdown(table, grid)),
             Expected("long_context_measured.json", "json", as_json(measured_record(measured, grid)))]
    return StageExpected("long_context", files, measured_record(measured, grid), str(units))


def baselines(paths: list[Path], certify_paths: list[Path], label: str) -> StageExpected:
    rep = baselines_report(load_tables(paths), load_tables(certify_paths), label)
    files = [Expected(f"{name}.csv", "csv", rep[key], keys) for key, (name, keys) in BASELINE_FILES.items()]
    files += [Expected("baselines.md", "text", rep["md"]),
              Expected("baselines_measured.json", "json", as_json(measured_record(rep["measured"], rep["label"])))]
    return StageExpected("baselines", files, measured_record(rep["measured"], rep["label"]),
                         f"{_names(paths)} beside {_names(certify_paths)}")


def _names(paths: list[Path]) -> str:
    return f"{paths[0].parent}/{{{','.join(p.stem for p in paths)}}}.csv" if len(paths) > 1 else str(paths[0])
