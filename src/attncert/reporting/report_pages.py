"""Pages of the Snakemake report (`snakemake --report report.html`): a summary table as HTML.

The report shows an HTML result inline and offers every other file (Markdown, CSV) only as a download, so each
summary table gets a page of its own: its Markdown twin rendered as it is (the title and legend lines the stage
wrote, then the table), or a CSV without a twin set as the stages set theirs (`table_files.markdown_text`: four
significant digits), an empty cell left empty.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd
from markdown_it import MarkdownIt

from attncert.integrity.file_integrity import sidecar_path
from attncert.integrity.intermediate_check import verify_intermediate

#: the look of a page: compact tables, numbers right-aligned as the Markdown says, the header row kept in view
PAGE_STYLE = """
body { font: 13px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 12px 16px; color: #1f2937; }
h1 { font-size: 16px; margin: 0 0 8px; } h2 { font-size: 14px; margin: 18px 0 6px; }
p.lead { color: #4b5563; margin: 0 0 10px; } p.source { color: #6b7280; font-size: 12px; }
table { border-collapse: collapse; margin: 6px 0 14px; font-variant-numeric: tabular-nums; width: max-content; }
th, td { border: 1px solid #d1d5db; padding: 2px 6px; vertical-align: top; max-width: 36em; }
th { background: #f3f4f6; position: sticky; top: 0; }
tr:nth-child(even) td { background: #fafafa; }
code { font-size: 12px; background: #f3f4f6; padding: 0 2px; }
"""


DELIMITER_ROW = re.compile(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?")


def _separators(row: str) -> int:
    return len(re.findall(r"(?<!\\)\|", row.strip()))


def escape_cell_pipes(text: str) -> str:
    """A table row with more cell separators than its table's delimiter row holds a `|` inside a cell (a header
    such as `max|y-t| < 1/2`): there every `|` that is neither at an end of the row nor between spaces is escaped,
    so the row keeps its cells. Rows that already fit are left as they are."""
    lines = text.split("\n")
    width = None
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            width = None
            continue
        if width is None:  # a table starts: its width is its delimiter row's
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            width = _separators(nxt) if DELIMITER_ROW.fullmatch(nxt.strip()) else None
        if width is not None and _separators(line) > width:
            inner = line.strip()[1:-1]
            inner = re.sub(r"(?<!\\)\|(?!(?<=\s\|)\s)", r"\\|", inner)
            lines[i] = f"|{inner}|"
    return "\n".join(lines)


def markdown_html(text: str) -> str:
    """CommonMark with pipe tables, as HTML (raw HTML in the text is shown as text, not interpreted)."""
    return MarkdownIt("commonmark", {"html": False}).enable("table").render(escape_cell_pipes(text))


def read_table_markdown(source: str | Path, title: str) -> str:
    """The table's Markdown: a `.md` as the stage wrote it, a `.csv` set in the stages' format under `title`.
    Checked against its sidecar first where it has one."""
    source = Path(source)
    if sidecar_path(source).is_file():
        verify_intermediate(source)
    if source.suffix == ".csv":
        df = pd.read_csv(source)
        table = df.astype(object).where(df.notna(), None).to_markdown(index=False, floatfmt=".4g", missingval="")
        return f"# {title}\n\n{table}\n"
    return source.read_text(encoding="utf-8")


def html_page(title: str, body: str) -> str:
    """A whole HTML page: `body` (HTML) under the page style."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{PAGE_STYLE}</style></head>\n<body>\n{body}</body></html>\n")


def table_page(source: str | Path, about: str, model: str) -> str:
    """The report page of one summary table: what it holds (`about`), the table, and the file it came from."""
    source = Path(source)
    title = f"{source.stem} — {model}" if not source.stem.startswith("minip_") else source.stem
    text = read_table_markdown(source, title)
    lead = f'<p class="lead">{html.escape(about)}</p>\n'
    foot = f'<p class="source">From <code>{html.escape(source.as_posix())}</code>.</p>\n'
    body = markdown_html(text)
    head, sep, rest = body.partition("</h1>\n")  # what the table holds: under its title
    body = head + sep + lead + rest if sep else lead + body
    return html_page(title, body + foot)
