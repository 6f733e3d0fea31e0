"""Writing the tables and figures of a stage: one place for file formats and the grid label.

Every table and figure names the model and the grid it comes from (`grid_label`), so results of the
embedded model are never read as GPT-2 results. Tables are written as CSV plus a Markdown twin with a
title; figures as PDF plus a PNG twin (for the README and the report).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from attncert.integrity.intermediate_check import verify_intermediate  # noqa: E402

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


def save_figure(fig, out_pdf: str | Path) -> None:
    """PDF and a 150-dpi PNG beside it; closes the figure."""
    out_pdf = Path(out_pdf)
    out_pdf.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_pdf, bbox_inches="tight")
    fig.savefig(out_pdf.with_suffix(".png"), bbox_inches="tight", dpi=150)
    plt.close(fig)


def write_table(df: pd.DataFrame, out_csv: str | Path, title: str) -> None:
    """CSV plus a Markdown twin headed by `title`."""
    out_csv = Path(out_csv)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    md = f"# {title}\n\n" + df.to_markdown(index=False, floatfmt=".4g") + "\n"
    out_csv.with_suffix(".md").write_text(md)
