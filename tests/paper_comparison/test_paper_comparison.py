"""comparison_table: measured files joined with the claims, set-up rows capping the rows that depend on them."""
import json
from pathlib import Path

import pytest

from attncert.paper_comparison.claims import load_claims
from attncert.paper_comparison.paper_comparison import (comparison_table, load_measured, to_markdown, verdict_counts,
                                                write_measured)

REPO = Path(__file__).resolve().parents[2]
CLAIMS = load_claims(REPO / "data" / "paper_claims.yaml")


@pytest.fixture
def measured(tmp_path):
    write_measured(tmp_path / "certify_measured.json",
                   {"second_order_slope": 2.01, "cert_seconds_fixed": 0.06, "first_order_slope": float("nan")},
                   "certify grid label")
    write_measured(
        tmp_path / "baselines_measured.json",
        {
            "crown_over_cert_fixed": [31.6, 34.5],
            "crown_seconds": [0.01, 0.02],
            "alpha_crown_seconds": [0.7, 0.8],
            "crown_seconds_beside_ci": [0.01, 0.02],
            "alpha_crown_seconds_beside_ci": [0.7, 0.8],
            "cert_seconds_beside_ci": [0.05, 0.07],
        },
        "baselines grid label",
    )
    write_measured(tmp_path / "minip_measured.json", {"witness_suite_size": 190, "witness_bound": 8}, "minip grid")
    return load_measured(sorted(tmp_path.glob("*_measured.json")))


def _row(table, cid):
    return table.set_index("id").loc[cid]


def test_rows_of_another_model_are_capped_and_labelled(measured):
    t = comparison_table(CLAIMS, measured, "all-MiniLM-L6-v2")
    assert len(t) == len(CLAIMS.claims)
    assert _row(t, "paper_a_model")["verdict"] == "set-up differs"
    cert = _row(t, "cert_seconds_fixed")
    assert (cert["verdict"], cert["uncapped"]) == ("qualitative", "stronger")
    assert "all-MiniLM-L6-v2" in cert["note"] and cert["our model/grid"] == "all-MiniLM-L6-v2; certify grid"
    assert _row(t, "second_order_slope")["verdict"] == "reproduced"     # an order: not a property of GPT-2
    assert _row(t, "crown_over_cert_fixed")["verdict"] == "qualitative"
    assert _row(t, "first_order_slope")["verdict"] == "n/a"            # NaN is not a measurement
    assert _row(t, "witness_suite_size")["verdict"] == "set-up differs"
    assert _row(t, "witness_bound")["uncapped"] == "reproduced" and _row(t, "witness_bound")["verdict"] == "qualitative"
    assert _row(t, "baselines_faster_than_cert")["uncapped"] == "stronger"  # α-CROWN 0.7–0.8 s is slower than 0.06 s


def test_on_the_papers_model_nothing_is_capped(measured):
    t = comparison_table(CLAIMS, measured, "GPT-2 small")
    assert _row(t, "paper_a_model")["verdict"] == "reproduced"
    assert _row(t, "cert_seconds_fixed")["verdict"] == "stronger"
    assert (t[t["paper"] == "A"]["verdict"] == t[t["paper"] == "A"]["uncapped"]).all()


def test_counts_and_markdown_agree_with_the_table(measured):
    t = comparison_table(CLAIMS, measured, "all-MiniLM-L6-v2")
    counts = verdict_counts(t)
    assert sum(counts.values()) == len(t) and counts["n/a"] == (t["verdict"] == "n/a").sum()
    md = to_markdown(t, CLAIMS, measured, "all-MiniLM-L6-v2")
    beyond = sum(c.beyond for c in CLAIMS.claims)
    assert (f"**Verdicts per row ({len(t)} rows: {len(t) - beyond} claims of the papers plus {beyond} variants beyond "
            "them):** " + ", ".join(f"{k} {n}" for k, n in counts.items())) in md
    assert "certify grid label" in md and "statements no measurement checks" in md


def test_each_tally_says_what_it_counts(measured):
    """The per-sentence tally names how many claims its sentences hold, and each paper's section gives its rows, claims
    and sentences with both tallies, so the sentence counts of the README and the row counts here are not read as
    contradicting each other."""
    t = comparison_table(CLAIMS, measured, "all-MiniLM-L6-v2")
    md = to_markdown(t, CLAIMS, measured, "all-MiniLM-L6-v2")
    paper = [c for c in CLAIMS.claims if not c.beyond]
    sentences = len({(c.paper, c.sentence) for c in paper})
    assert f"({sentences} sentences holding {len(paper)} claims, each sentence judged by its least favourable" in md
    for letter in ("A", "B"):
        rows = [c for c in CLAIMS.claims if c.paper == letter]
        own = [c for c in rows if not c.beyond]
        head = next(x for x in md.splitlines() if x.startswith(f"## Paper {letter} ("))
        assert head.endswith(f"— {len(rows)} rows: {len(own)} claims in {len({c.sentence for c in own})} sentences"
                             + (f", {len(rows) - len(own)} variants beyond the paper" if len(rows) > len(own) else ""))
        tallies = md.split(head)[1].split("\n\n")[1]
        assert tallies.startswith("Per row: ") and ". Per sentence: " in tallies


def test_the_markdown_shows_every_sentence_in_english_beside_the_korean(measured):
    t = comparison_table(CLAIMS, measured, "all-MiniLM-L6-v2")
    md = to_markdown(t, CLAIMS, measured, "all-MiniLM-L6-v2")
    sentences = md.split("## Sentences")[1]
    for c in CLAIMS.claims:
        line = next(x for x in sentences.splitlines() if c.id in x.split(":")[0])
        assert c.sentence in line and f"*{c.english}*" in line, c.id
    for x in CLAIMS.not_checked["A"] + CLAIMS.not_checked["B"]:
        assert f"{x['sentence']} ({x['english']})" in md
    # the effective-rank sentence is judged by three claims and listed once
    assert sum("유효 랭크는 중앙값 11" in x for x in sentences.splitlines()) == 1


def test_a_key_emitted_twice_is_an_error(tmp_path):
    for stage in ("certify", "block"):
        (tmp_path / f"{stage}_measured.json").write_text(json.dumps({"grid": "g", "values": {"block_units": 60}}))
    with pytest.raises(ValueError, match="block_units.*also emitted by the block stage"):
        load_measured([tmp_path / "block_measured.json", tmp_path / "certify_measured.json"])


def test_a_malformed_measured_file_is_an_error(tmp_path):
    p = tmp_path / "x_measured.json"
    p.write_text(json.dumps({"values": {}}))
    with pytest.raises(ValueError, match="grid"):
        load_measured([p])
