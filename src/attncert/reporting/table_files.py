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


#: the perturbation set of each norm, in words
NORM_WORDS = {"linf": "ℓ∞", "l2": "ℓ2"}


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 prompt', '2 prompts' ('1 radius', '6 radii' with words="radii")."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def positions_words(positions) -> str:
    """'query position 4', 'query positions 4, 8'."""
    positions = sorted(int(p) for p in positions)
    return f"query position{'' if len(positions) == 1 else 's'} {', '.join(map(str, positions))}"


def norms_words(norms) -> str:
    """'ℓ∞ ball', 'ℓ∞ and ℓ2 balls' (unknown norms by their name)."""
    names = [NORM_WORDS.get(n, n) for n in sorted(norms)]
    return f"{' and '.join(names)} ball{'' if len(names) == 1 else 's'}"


def grid_label(df: pd.DataFrame, model: str) -> str:
    """'model: L layers × H heads, P prompts, query position 4, R radii, ℓ∞ ball; N units'."""
    units = df.groupby(GRID_KEYS).ngroups
    return (f"{model}: {plural(df['layer'].nunique(), 'layer')} × {plural(df['head'].nunique(), 'head')}, "
            f"{plural(df['prompt'].nunique(), 'prompt')}, {positions_words(df['query_pos'].unique())}, "
            f"{plural(df['radius'].nunique(), 'radius', 'radii')}, "
            f"{norms_words(df['norm'].unique())}; {units} units")


def markdown_text(df: pd.DataFrame, title: str) -> str:
    """The Markdown twin of a table: `# title`, the table (4 significant digits)."""
    return f"# {title}\n\n" + df.to_markdown(index=False, floatfmt=".4g") + "\n"


def write_table(df: pd.DataFrame, out_csv: str | Path, title: str, markdown: str | None = None) -> None:
    """CSV plus a Markdown twin: `markdown` (e.g. with headers in words and a legend, `table_legend`), else
    `markdown_text(df, title)`."""
    out_csv = Path(out_csv)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_csv, index=False)
    out_csv.with_suffix(".md").write_text(markdown_text(df, title) if markdown is None else markdown)
