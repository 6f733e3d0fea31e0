"""Comparing a stored summary table with its recomputation, number by number, as audit records.

Tolerances (stated in every record's reason):

* a number of a CSV table or a measured-values JSON: equal, or within `REL_TOL` = 1e-9 of the larger magnitude
  (both sides went through CSV or JSON text; the recomputation uses the writer's own functions on the same rows,
  so an honest table agrees to the last digit written); NaN equals NaN, an infinity only itself; a boolean only
  the same boolean;
* a text cell (a label, a formatted range such as "0.12 (0.1–0.3)"), a Markdown file: equal as written.

Rows of a CSV table are matched by the table's key columns (e.g. mode and radius), so a deleted, added or
re-keyed row fails once, as a row, and every other row is still compared cell by cell.
"""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd

from attncert.integrity.file_integrity import sidecar_path
from attncert.integrity.intermediate_check import IntermediateError, verify_intermediate

REL_TOL = 1e-9
CHECK = "tables"
NUMBER_TOLERANCE = f"equal within relative {REL_TOL:g}"
TEXT_TOLERANCE = "equal as written"
UNIT_COLUMNS = ("head", "prompt", "query_pos", "radius", "norm", "mode", "length")


def table_record(table: str, number: str, status: str, reason: str, row: int = -1, key: dict | None = None,
                 reported=math.nan) -> dict:
    """One audit record (the keys of `table_coverage._row_record`) for a number of a summary table."""
    key = key or {}
    return {"table": table, "layer": key.get("layer", ""), "row": row,
            **{c: key.get(c, key.get("position", "") if c == "query_pos" else "") for c in UNIT_COLUMNS},
            "number": number, "reported": _as_number(reported), "status": status, "check": CHECK,
            "margin": -math.inf if status == "fail" else math.nan, "reason": reason, "margins": ""}


def _as_number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def same_value(stored, recomputed) -> bool:
    """Equal under the stated tolerance: numbers (and numeric text) within REL_TOL, anything else as written."""
    if isinstance(stored, bool) or isinstance(recomputed, bool):
        return type(stored) is type(recomputed) and stored == recomputed
    if stored is None or recomputed is None:
        return stored is None and recomputed is None
    try:
        a, b = float(stored), float(recomputed)
    except (TypeError, ValueError):
        return str(stored) == str(recomputed)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return a == b or abs(a - b) <= REL_TOL * max(abs(a), abs(b))


def stored_file(path: Path, table: str) -> tuple[Path | None, list[dict]]:
    """(path, []) when the summary file exists and matches its sidecar (if it has one); else (None, [fail])."""
    if not path.is_file():
        return None, [table_record(table, "file", "fail", f"{path} is missing: the run's row tables call for it")]
    if sidecar_path(path).is_file():
        try:
            verify_intermediate(path)
        except IntermediateError as e:
            return None, [table_record(table, "file", "fail", f"sidecar: {e}")]
    return path, []


def as_written(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as its CSV file reads back (`to_csv(index=False)` then `read_csv`)."""
    return pd.read_csv(io.StringIO(frame.to_csv(index=False)))


def compare_frame(table: str, stored: pd.DataFrame, recomputed: pd.DataFrame, keys: list[str],
                  sources: str) -> list[dict]:
    """Per column one pass record, or one fail per differing cell; one fail per missing, extra or repeated row."""
    want = as_written(recomputed)
    out = [table_record(table, c, "fail", f"column {c!r} {why} (recomputed from {sources})")
           for c, why in [(c, "missing") for c in want.columns if c not in stored.columns]
           + [(c, "not recomputed: not in the table the writer gives") for c in stored.columns
              if c not in want.columns]]
    keys = [k for k in keys if k in stored.columns and k in want.columns]
    pairs, rows_out = _match_rows(table, stored, want, keys, sources)
    out += rows_out
    for col in [c for c in want.columns if c in stored.columns]:
        bad = [(i, j) for i, j in pairs if not same_value(_cell(stored, i, col), _cell(want, j, col))]
        for i, j in bad:
            key = {k: want.at[j, k] for k in want.columns if k in UNIT_COLUMNS or k == "layer"}
            out.append(table_record(table, col, "fail", f"row {_describe(want, j, keys)}: stored "
                                    f"{_cell(stored, i, col)!r}, recomputed {_cell(want, j, col)!r} from {sources} "
                                    f"({NUMBER_TOLERANCE}; text {TEXT_TOLERANCE})", row=int(i), key=key,
                                    reported=_cell(stored, i, col)))
        if not bad:
            out.append(table_record(table, col, "pass", f"{len(pairs)} rows recomputed from {sources} "
                                    f"({NUMBER_TOLERANCE}; text {TEXT_TOLERANCE})"))
    return out


def _cell(frame: pd.DataFrame, i, col):
    v = frame.at[i, col]
    return v.item() if hasattr(v, "item") else v


def _describe(frame: pd.DataFrame, i, keys: list[str]) -> str:
    return ", ".join(f"{k} = {_cell(frame, i, k)!r}" for k in keys) if keys else f"{i}"


def _row_key(frame: pd.DataFrame, i, keys: list[str]) -> tuple:
    return tuple(str(_cell(frame, i, k)) for k in keys)


def _match_rows(table, stored, want, keys, sources) -> tuple[list[tuple], list[dict]]:
    """Pairs (stored row, recomputed row) matched by key; fail records for rows on one side only or repeated."""
    if not keys:
        n = min(len(stored), len(want))
        fails = [] if len(stored) == len(want) else [table_record(
            table, "rows", "fail", f"{len(stored)} rows stored, {len(want)} recomputed from {sources}")]
        return [(i, i) for i in range(n)], fails
    have = {}
    fails = []
    for i in stored.index:
        k = _row_key(stored, i, keys)
        if k in have:
            fails.append(table_record(table, "rows", "fail", f"row {_describe(stored, i, keys)} repeated", row=int(i)))
        have.setdefault(k, i)
    pairs, seen = [], set()
    for j in want.index:
        k = _row_key(want, j, keys)
        seen.add(k)
        if k in have:
            pairs.append((have[k], j))
        else:
            fails.append(table_record(table, "rows", "fail", f"row {_describe(want, j, keys)} missing: recomputed "
                                      f"from {sources}, not in the table"))
    fails += [table_record(table, "rows", "fail", f"row {_describe(stored, i, keys)} is not a row the writer gives "
                           f"for {sources}", row=int(i)) for k, i in have.items() if k not in seen]
    if not fails:
        fails.append(table_record(table, "rows", "pass", f"{len(pairs)} rows, keyed by {', '.join(keys)}, exactly "
                                  f"those recomputed from {sources}"))
    return pairs, fails


def compare_values(table: str, stored, recomputed, path: str, sources: str) -> list[dict]:
    """A JSON value against its recomputation: one record per leaf key of a dict (recursively)."""
    if isinstance(recomputed, dict):
        if not isinstance(stored, dict):
            return [table_record(table, path or "file", "fail", f"stored {stored!r} is not an object")]
        out = [table_record(table, f"{path}.{k}".lstrip("."), "fail", f"stored key without a recomputed value: "
                            f"{stored[k]!r}") for k in stored if k not in recomputed]
        for k, v in recomputed.items():
            name = f"{path}.{k}".lstrip(".")
            out += (compare_values(table, stored[k], v, name, sources) if k in stored else
                    [table_record(table, name, "fail", f"missing; recomputed {v!r} from {sources}")])
        return out
    ok = _same_tree(stored, recomputed)
    why = f"stored {stored!r}, recomputed {recomputed!r} from {sources} ({NUMBER_TOLERANCE}; text {TEXT_TOLERANCE})"
    return [table_record(table, path, "pass" if ok else "fail", why, reported=stored if not ok else math.nan)]


def _same_tree(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_tree(x, y) for x, y in zip(a, b))
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return False
    return same_value(a, b)


def as_json(record) -> object:
    """A record as the JSON file reads back (`provenance.write_json`'s dump, then `json.loads`)."""
    return json.loads(json.dumps(record, sort_keys=True, default=str))


def compare_text(table: str, stored: str, recomputed: str, sources: str) -> list[dict]:
    """A generated text file (Markdown) against its recomputation, equal as written; the first differing line."""
    if stored == recomputed:
        return [table_record(table, "text", "pass", f"the text recomputed from {sources}, {TEXT_TOLERANCE}")]
    a, b = stored.splitlines(), recomputed.splitlines()
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return [table_record(table, "text", "fail", f"line {n + 1} stored {a[n] if n < len(a) else '<end>'!r}, "
                         f"recomputed {b[n] if n < len(b) else '<end>'!r} from {sources} ({TEXT_TOLERANCE})",
                         row=n)]
