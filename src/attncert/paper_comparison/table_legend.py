"""The paper comparison's tables in words: the legend of every column of paper_vs_reproduced.md and docs/results.md,
and the counts that explain why the two tallies differ (a sentence of a paper can carry several claims; the table
also holds variants beyond the papers).
"""
from __future__ import annotations

import pandas as pd

from attncert.paper_comparison.sentence_tally import beyond_table, sentence_table

#: column -> its definition (the headers are words already)
COLUMNS = {
    "id": "the claim's key in data/paper_claims.yaml",
    "claim": "what the paper states, as a measurable quantity",
    "paper value": "the paper's number as the verdict reads it (≤ x: a limit; lo–hi: a band; a < b: an order)",
    "ours": "this run's value of the same quantity",
    "our model/grid": "the model and the stage grid that produced ours (listed below)",
    "verdict": "reproduced, stronger, qualitative, differs, set-up differs or n/a "
               "(`attncert.paper_comparison.verdict`)",
    "note": "why a verdict is capped at qualitative, and the verdict the numbers alone would get",
    "before cap": "the verdict the numbers alone would get, where a cap changed it",
    "tolerance": "how far ours may lie from the paper's value and still count as reproduced",
    "why": "the reason for the tolerance and direction (data/paper_claims.yaml)",
}


def legend(columns) -> str:
    """The legend of a claims table: one line per column."""
    return "Columns:\n\n" + "\n".join(f"- **{c}**: {COLUMNS[c]}" for c in columns) + "\n"


def rows_words(table: pd.DataFrame) -> str:
    """'81 rows: 67 claims of the papers plus 14 variants beyond them' (the comparison table's size, explained)."""
    beyond = len(beyond_table(table))
    return f"{len(table)} rows: {len(table) - beyond} claims of the papers plus {beyond} variants beyond them"


def part_words(part: pd.DataFrame) -> str:
    """One paper's part of the table: '59 rows: 48 claims in 45 sentences, 11 variants beyond the paper'."""
    beyond = len(beyond_table(part))
    return (f"{len(part)} rows: {len(part) - beyond} claims in {len(sentence_table(part))} sentences"
            + (f", {beyond} variants beyond the paper" if beyond else ""))
