"""Every Markdown table the pipeline writes speaks words: no header is a machine column name, every header is defined
in the legend under its table, and the grid labels say "query position 4" and "ℓ∞ ball" (the tiny run's tables,
written by the pipeline's own entry scripts, and the Min-IP tables from a small sweep)."""
import re

import numpy as np
import pandas as pd
import pytest

from attncert.minip import tables as minip_tables
from summary_run import MODEL, write_run

MARKDOWN = ["certification.md", "certification_slopes.md", "certification_vs_paper.md", "soundness_violations.md",
            "baselines.md", "block_summary.md", "block_vs_paper.md", "block_certificate.md", "long_context.md",
            "paper_vs_reproduced.md"]


@pytest.fixture(scope="module")
def run_tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("legend_run")
    write_run(root)
    return root / "figures" / "tables" / MODEL


def tables_with_legends(md: str) -> list[tuple[list[str], str]]:
    """(headers, the text after the table up to the next table or heading) of every Markdown table of a page."""
    lines, out, i = md.splitlines(), [], 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"\|[-:| ]+\|$", lines[i + 1]):
            headers = [h.strip().replace("\\|", "|") for h in re.split(r"(?<!\\)\|", lines[i].strip("|"))]
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            k = j
            while k < len(lines) and not lines[k].startswith(("|", "#")):
                k += 1
            out.append((headers, "\n".join(lines[j:k])))
            i = k
        else:
            i += 1
    return out


def check_page(md: str, name: str) -> None:
    found = tables_with_legends(md)
    assert found, f"{name}: no table"
    for headers, after in found:
        for h in headers:
            assert not re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", h), f"{name}: header {h!r} is a machine name"
            assert f"- **{h}**: " in after, f"{name}: no legend line for {h!r}"


@pytest.mark.parametrize("name", MARKDOWN)
def test_every_table_has_headers_in_words_and_a_legend(run_tables, name):
    check_page((run_tables / name).read_text(encoding="utf-8"), name)


def test_titles_speak_words(run_tables):
    for name in ("certification.md", "baselines.md", "long_context.md"):
        text = (run_tables / name).read_text(encoding="utf-8").split("\n\n")[0:2]
        head = " ".join(text)
        assert "query position 4" in head and "query pos [" not in head, name
        assert "linf" not in head and "ℓ∞" in (run_tables / "certification.md").read_text(encoding="utf-8"), name


def _sweep() -> tuple[pd.DataFrame, dict]:
    rows = []
    for seed in range(2):
        for rank in (1, 4, 16):
            rows.append(dict(setting="witness", bits=24, length=3, kind="kernel", rank=rank, seed=seed,
                             error=0.1 / rank, error_query_position=0.2 / rank, max_abs_error=2.0 / rank,
                             max_abs_error_query_position=1.5 / rank, fraction_queries_failed=0.5 / rank))
            for bits in (8, 12):
                rows.append(dict(setting=f"m{bits}-n3", bits=bits, length=3, kind="kernel", rank=rank, seed=seed,
                                 error_iid=0.1 / rank, error_ood=0.2 / rank, max_abs_error_iid=1.0 / rank,
                                 max_abs_error_ood=1.2 / rank))
        rows.append(dict(setting="witness", bits=24, length=3, kind="dense", rank=np.nan, seed=seed, error=0.0,
                         error_query_position=0.0, max_abs_error=0.02, max_abs_error_query_position=0.01,
                         fraction_queries_failed=0.0))
        for bits in (8, 12):
            rows.append(dict(setting=f"m{bits}-n3", bits=bits, length=3, kind="dense", rank=np.nan, seed=seed,
                             error_iid=0.0, error_ood=0.0, max_abs_error_iid=0.1, max_abs_error_ood=0.2))
    bound = dict(bits=24, bound=8, family_size=190, n_queries=10, gap=6, frobenius=8, dominant=6, min_ratio=5)
    return pd.DataFrame(rows), bound


def test_the_minip_tables_have_headers_in_words_and_a_legend():
    runs, bound = _sweep()
    frames = {"witness": minip_tables.witness_table(runs, bound),
              "witness_maxerr": minip_tables.witness_maxerr_table(runs, bound),
              "thresholds": minip_tables.threshold_table(runs, [0.01, 0.05]),
              "transition": minip_tables.transition_table(runs, 0.05),
              "constructions": pd.DataFrame({"construction": ["rank-1 kernel"], "rank": [1], "guarantee": ["exact"],
                                             "m": [1], "N": [1], "sequences": [2], "max_abs_error": [0.0],
                                             "error": [0.0], "max_abs_diff_to_dense": [np.nan]})}
    for name, frame in frames.items():
        check_page(minip_tables.markdown(frame, name, ["a note"]), f"minip_{name}.md")
    with pytest.raises(KeyError, match="new_column"):
        minip_tables.markdown(frames["witness"].assign(new_column=1), "witness")


def test_the_audit_table_has_headers_in_words_and_a_legend():
    from attncert.audit.audit_table import summary_markdown

    check_page(summary_markdown([], "m", 1.0, [0]), "audit.md")
