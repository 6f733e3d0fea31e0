"""The paper comparison and the README's results, recomputed from the stages' recomputed measured values.

`paper_vs_reproduced.{csv,md,json}` join every stage's measured values with `data/paper_claims.yaml`
(`paper_comparison.comparison_table`, `to_markdown`). Here the values of the certification, baseline, block and
long-context stages are the ones recomputed from the row tables (never read from their measured files); those of
the stages without certified rows (Min-IP, the method checks) are read from their measured files as stored (their
sidecars checked): they are not certified numbers, and this check does not vouch for them.

The README's results section and `docs/results.md` are rendered from `data/reference_run.json`
(`paper_comparison.readme_results`), a copy of some run's `paper_vs_reproduced.json`. They are tied to this run
only when that copy is this run's snapshot (the same provenance record); then the tally and the results page are
recomputed from this run's recomputed values and must equal the committed text. Otherwise they come from another
run, and the record says so ("not applicable").
"""
from __future__ import annotations

import json
from pathlib import Path

from attncert.audit.stage_tables_expected import Expected
from attncert.audit.table_compare import as_json, table_record
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.paper_comparison.claims import load_claims
from attncert.paper_comparison.paper_comparison import comparison_table, grids, load_measured, to_markdown
from attncert.paper_comparison.readme_results import BEGIN, END, render_results, render_tally

#: the measured files of the stages without certified rows (read as stored)
OTHER_MEASURED = ("method_checks_measured.json", "minip_measured.json")


def other_measured_paths(tables_root: Path, model: str, config: dict | None) -> list[Path]:
    """Where the run's OTHER_MEASURED files are under `tables_root` (figures/tables): the method checks with the
    model's tables, Min-IP's under its grid (`minip.name` of the run's configuration; left out without one)."""
    grid = ((config or {}).get("minip") or {}).get("name")
    return [tables_root / model / OTHER_MEASURED[0]] + ([tables_root / "minip" / grid / OTHER_MEASURED[1]]
                                                        if grid else [])


def joined_measured(recomputed: dict[str, dict], other: list[Path]) -> dict:
    """The paper comparison's input ({key: {"value", "grid", "source"}}, `load_measured`'s form): our stages'
    recomputed records, the other stages' stored files `other` (`other_measured_paths`, those present)."""
    out = {}
    for stage, record in recomputed.items():
        record = as_json(record)
        out.update({k: {"value": v, "grid": record["grid"], "source": stage} for k, v in record["values"].items()})
    for path in other:
        if path.is_file():
            out.update(load_measured([verify_intermediate(path)]))
    return out


def paper_vs_reproduced(measured: dict, claims: Path, label: str) -> list[Expected]:
    """paper_vs_reproduced.csv (rows by claim id), .md, and the snapshot's "model" and "measured"."""
    table = comparison_table(load_claims(claims), measured, label)
    return [Expected("paper_vs_reproduced.csv", "csv", table, ("id",)),
            Expected("paper_vs_reproduced.md", "text", to_markdown(table, load_claims(claims), measured, label)),
            Expected("paper_vs_reproduced.json", "json", as_json({"model": label, "measured": measured}))]


def readme_records(snapshot_path: Path, reference_path: Path, readme: Path, results: Path, measured: dict,
                   claims: Path, label: str) -> list[tuple[str, str, str]]:
    """[(file, "text to compare" or None, reason)]: the README's results block and docs/results.md as this run
    gives them when the committed reference run is this run; None and the reason when it is another run."""
    try:
        reference = json.loads(reference_path.read_text(encoding="utf-8"))
        snapshot = json.loads(snapshot_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return [(p.name, None, f"cannot tie to this run: {e}") for p in (readme, results)]
    if reference.get("provenance") != snapshot.get("provenance"):
        made = (reference.get("provenance") or {}).get("created_utc", "?")
        ours = (snapshot.get("provenance") or {}).get("created_utc", "?")
        why = (f"rendered from {reference_path} (the run of {made}), not this run's {snapshot_path.name} ({ours}): "
               "its numbers are not this run's; adopting this run (`python -m attncert.paper_comparison."
               "readme_results <snapshot>`) ties them")
        return [(p.name, None, why) for p in (readme, results)]
    table = comparison_table(load_claims(claims), measured, label)
    return [(readme.name, render_tally(table, label), "the results block between the README's markers"),
            (results.name, render_results(table, label, grids(measured)), "the whole page")]


def readme_block(readme: Path) -> str | None:
    """The text between the README's results markers (None when they are not there once each)."""
    text = readme.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        return None
    return text.split(BEGIN)[1].split(END)[0].strip("\n")


def not_applicable(name: str, reason: str) -> dict:
    return table_record(name, "text", "not applicable", reason)
