"""A summary table as a page of the Snakemake report: the Markdown the stage wrote becomes an HTML table (a `|`
inside a header cell keeps the row's cells), a CSV without a twin is set in the stages' format, and a table that is
not the file its sidecar describes is refused."""
import re

import pandas as pd
import pytest

from attncert.integrity.intermediate_check import IntermediateError
from attncert.provenance.provenance import provenance, write_sidecar
from attncert.reporting.report_index import CATEGORIES, REPORT_TABLES, report_tables, table_source
from attncert.reporting.report_pages import escape_cell_pipes, markdown_html, table_page

MD = """# Transition rank (a title)

Legend: '>R' = not reached.

| bits | error < 0.1 | max|y-t| < 1/2 | dense |
|---|---|---|---|
| 8 | 1 | >64 | 0.16 |
| 12 | a\\|b | 1 | 0.39 |
"""


def _cells(html: str, tag: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    return [re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", r, re.S) for r in rows if f"<{tag}" in r]


def test_a_pipe_inside_a_header_cell_keeps_the_rows_cells():
    html = markdown_html(MD)
    assert _cells(html, "th") == [["bits", "error &lt; 0.1", "max|y-t| &lt; 1/2", "dense"]]
    assert _cells(html, "td") == [["8", "1", "&gt;64", "0.16"], ["12", "a|b", "1", "0.39"]]
    fitting = "| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert escape_cell_pipes(fitting) == fitting  # rows that fit are left as they are
    assert "<table>" not in markdown_html(MD.replace("max|y-t| < 1/2", "max|y-t|<1/2 | extra")).split("</p>")[0]


def test_a_markdown_table_page_has_its_title_lead_table_and_source(tmp_path):
    md = tmp_path / "minip_x.md"
    md.write_text(MD)
    write_sidecar(md, provenance({"code": "t"}, stage="t"))
    page = table_page(md, "What it holds.", "m")
    assert page.startswith("<!DOCTYPE html>")
    assert '<h1>Transition rank (a title)</h1>\n<p class="lead">What it holds.' in page
    assert "<table>" in page and f"From <code>{md.as_posix()}</code>" in page
    assert "<script" not in markdown_html("<script>alert(1)</script>\n")  # raw HTML in a table is shown as text


def test_a_csv_is_set_in_the_stages_format_with_empty_cells_empty(tmp_path):
    csv = tmp_path / "headline.csv"
    pd.DataFrame({"method": ["crown", "ibp"], "ratio": [1.23456789, 2.0], "paper": ["0.01–0.02", None]}).to_csv(
        csv, index=False)
    write_sidecar(csv, provenance({"code": "t"}, stage="t"))
    page = table_page(csv, "Headline.", "m")
    assert "<h1>headline — m</h1>" in page
    assert _cells(page, "td") == [["crown", "1.235", "0.01–0.02"], ["ibp", "2", ""]]


def test_a_table_that_is_not_its_sidecars_file_is_refused(tmp_path):
    md = tmp_path / "t.md"
    md.write_text(MD)
    write_sidecar(md, provenance({"code": "t"}, stage="t"))
    md.write_text(MD.replace("0.16", "0.99"))
    with pytest.raises(IntermediateError, match="t.md is corrupted"):
        table_page(md, "x", "m")


def test_every_page_has_a_stage_category_and_a_source_of_its_own():
    assert {t.category for t in REPORT_TABLES.values()} <= set(CATEGORIES)
    sources = [table_source(n, "m", "g") for n in REPORT_TABLES]
    assert len(set(sources)) == len(sources) and all(re.fullmatch(r"figures/tables/(m|minip/g)/\w+\.(md|csv)", s)
                                                     for s in sources)
    assert all(":" not in c for c in CATEGORIES)  # a colon ends the reST target Snakemake makes of a category
    assert sorted(CATEGORIES) == list(CATEGORIES)  # the report lists categories alphabetically: pipeline order
    assert set(report_tables()) == set(REPORT_TABLES)
    without = set(report_tables(block=False, long_context=False))
    assert not any(n.startswith(("block_", "long_context")) for n in without) and "certification" in without
