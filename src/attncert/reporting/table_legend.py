"""Markdown tables for readers: every header in words (with its unit), a legend under the table defining every
column, and the cells whose number is at the solver's noise floor marked.

The CSV twin of a table keeps the machine column names (scripts, the audit's recomputation and the tests read
them); only the Markdown speaks words. A stage keeps its wording in one module (`certify.table_legend`,
`baselines.table_legend`, `block.table_legend`, `minip.table_legend`) as a mapping machine name -> `Column`, and
renders with `legend_table`. A column without a wording is an error, so no table can gain an undefined header.

Marks: `marks` maps a column to a boolean per row; a marked cell gets `NOISE_MARK` and the legend ends with the
line that says what the mark means (`noise_note`), so a ratio or slope computed from a gap at the solver's
noise floor is never shown as a result (the floor: `noise_floor.SOLVER_NOISE`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: the mark of a number computed from gaps below the solver noise floor
NOISE_MARK = "†"


@dataclass(frozen=True)
class Column:
    """A column as readers see it: the header in words (with the unit where there is one) and its definition."""
    header: str
    meaning: str


#: the columns that name one unit of a head's row tables (layer, head, prompt, query position, ball)
UNIT_KEY = {
    "layer": Column("layer", "transformer layer of the head"),
    "head": Column("head", "attention head within the layer"),
    "prompt": Column("prompt", "index of the prompt the tokens come from"),
    "query_pos": Column("query position", "position of the query token in the prompt"),
    "norm": Column("ball", "the perturbation set: linf = ℓ∞ ball, l2 = ℓ2 ball"),
}


def floor_words(floor: float) -> str:
    """1e-07 -> '1e-7'."""
    return f"{floor:g}".replace("e-0", "e-")


def noise_note(floor: float) -> str:
    """The legend line of `NOISE_MARK`."""
    return (f"{NOISE_MARK} computed from gaps below the solver noise floor ({floor_words(floor)} of the relaxation's "
            "objective unit, docs/certificate.md §6.1): at least half of the units it summarizes (for a largest "
            "value: the unit that attains it) have a gap the solvers cannot resolve, so the number is not a result")


def format_cell(value, floatfmt: str) -> str:
    """One cell as the table shows it: floats to `floatfmt`, NaN as "nan", everything else as text."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return "nan" if np.isnan(value) else format(float(value), floatfmt)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return "" if value is None else str(value)


def _escape(text: str) -> str:
    """A cell's `|` escaped (|y − t| would otherwise split the cell)."""
    return text.replace("|", "\\|")


def legend_table(df: pd.DataFrame, columns: Mapping[str, Column], floatfmt: str = ".4g",
                 marks: Mapping[str, object] | None = None, hide: tuple = (), floor: float | None = None,
                 notes: tuple | list = ()) -> str:
    """The table with headers in words and, under it, the legend: one line per shown column, then `notes`, then
    the mark's line when some cell is marked. `hide`: columns kept out of the Markdown (e.g. a flag that only
    drives a mark); `floor`: the noise floor the mark's line names (required when `marks` mark a cell)."""
    shown = [c for c in df.columns if c not in hide]
    missing = [c for c in shown if c not in columns]
    if missing:
        raise KeyError(f"no wording for the column(s) {missing}: add them to the stage's table_legend")
    marks = marks or {}
    cells = pd.DataFrame(index=df.index)
    marked_any = False
    for c in shown:
        flags = np.asarray(marks[c], dtype=bool) if c in marks else np.zeros(len(df), dtype=bool)
        marked_any |= bool(flags.any())
        cells[_escape(columns[c].header)] = [_escape(format_cell(v, floatfmt)) + (f" {NOISE_MARK}" if f else "")
                                             for v, f in zip(df[c].tolist(), flags)]
    numeric = [pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]) for c in shown]
    body = cells.to_markdown(index=False, disable_numparse=True,
                             colalign=["right" if n else "left" for n in numeric]) if shown else ""
    legend = [f"- **{columns[c].header}**: {columns[c].meaning}" for c in shown] + [f"- {n}" for n in notes]
    if marked_any:
        if floor is None:
            raise ValueError("a marked cell needs the noise floor its legend line names")
        legend.append(f"- {noise_note(floor)}.")
    return body + "\n\nColumns:\n\n" + "\n".join(legend) + "\n"
