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

from attncert.reporting.table_files import (  # noqa: E402,F401 - re-exported
    GRID_KEYS, grid_label, load_tables, markdown_text, write_table)


def save_figure(fig, out_pdf: str | Path) -> None:
    """PDF and a 150-dpi PNG beside it; closes the figure."""
    out_pdf = Path(out_pdf)
    out_pdf.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_pdf, bbox_inches="tight")
    fig.savefig(out_pdf.with_suffix(".png"), bbox_inches="tight", dpi=150)
    plt.close(fig)
