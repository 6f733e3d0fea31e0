"""The text of a stage's tables, without plotting: the grid label, the Markdown twin, reading per-layer tables.

Pure (pandas and the sidecar check only), so the audit's recomputation of the summary tables
(`attncert.audit.table_recompute`) renders them with the very functions that wrote them.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from attncert.integrity.intermediate_check import verify_intermediate

GRID_KEYS = ["layer", "head", "prompt", "query_pos", "radius", "norm", "mode"]


def load_tables(paths) -> pd.DataFrame:
    """Concatenate per-layer CSV tables, each checked against its sidecar first."""
    return pd.concat([pd.read_csv(verify_intermediate(p)) for p in paths], ignore_index=True)


def grid_label(df: pd.DataFrame, model: str) -> str:
    """'model: L layers × H heads, P prompts, query pos [...], R radii, norms; N units'."""
    units = df.groupby(GRID_KEYS).ngroups
    return (f"{model}: {df['layer'].nunique()} layers × {df['head'].nunique()} heads, "
            f"{df['prompt'].nunique()} prompts, query pos {sorted(df['query_pos'].unique().tolist())}, "
            f"{df['radius'].nunique()} radii, {'/'.join(sorted(df['norm'].unique()))}; {units} units")


def markdown_text(df: pd.DataFrame, title: str) -> str:
    """The Markdown twin of a table: `# title`, the table (4 significant digits)."""
    return f"# {title}\n\n" + df.to_markdown(index=False, floatfmt=".4g") + "\n"


def write_table(df: pd.DataFrame, out_csv: str | Path, title: str) -> None:
    """CSV plus a Markdown twin headed by `title`."""
    out_csv = Path(out_csv)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    out_csv.with_suffix(".md").write_text(markdown_text(df, title))
