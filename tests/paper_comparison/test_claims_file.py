"""data/paper_claims.yaml: it loads, every claim is complete, and a malformed file fails in one clear line."""
from pathlib import Path

import pytest
import yaml

from attncert.paper_comparison.claims import ClaimsError, load_claims

REPO = Path(__file__).resolve().parents[2]
CLAIMS_FILE = REPO / "data" / "paper_claims.yaml"


def test_the_claims_file_loads_and_every_claim_states_tolerance_and_why():
    claims = load_claims(CLAIMS_FILE)
    assert {c.paper for c in claims.claims} == {"A", "B"}
    for c in claims.claims:
        assert c.why.endswith(".") and c.sentence, c.id
        assert c.english and not any("\uac00" <= ch <= "\ud7a3" for ch in c.english), c.id  # English, no Hangul
    for x in claims.not_checked["A"] + claims.not_checked["B"]:
        assert x["english"] and not any("\uac00" <= ch <= "\ud7a3" for ch in x["english"]), x["sentence"]
    # the same quoted text is one sentence, so it has one translation
    english = {}
    for c in claims.claims:
        assert english.setdefault(c.sentence, c.english) == c.english, c.id
    assert {c.id for c in claims.claims if c.beyond} == {
        "tight_rel_gap_r0.002", "tight_rel_gap_r0.02", "tight_gap_le_secant_everywhere", "tight_cert_seconds_fixed",
        "long_context_largest_n", "long_context_rel_gap_r0.002", "long_context_rel_gap_r0.02",
        "long_context_varying_largest_n", "long_context_varying_rel_gap_r0.002", "long_context_varying_rel_gap_r0.02",
        "long_context_varying_seconds_r0.002", "block_certificate_over_perop_r0.0001",
        "block_certificate_over_perop_r0.001", "block_certificate_sound_and_finite"}
    timing = claims.by_id()["baselines_faster_than_cert"]
    assert timing.tolerance == ("factor", 1.5) and all(k.endswith("_seconds_beside_ci") for k in timing.measured)
    # every magnitude of GPT-2's heads depends on the model row, so another model caps it
    by_id = claims.by_id()
    assert by_id["paper_a_model"].form == "setup"
    assert "paper_a_model" in by_id["crown_over_cert_fixed"].depends_on
    assert "witness_suite_size" in by_id["witness_bound"].depends_on


def _mutated(tmp_path, mutate) -> Path:
    doc = yaml.safe_load(CLAIMS_FILE.read_text())
    mutate(doc)
    p = tmp_path / "claims.yaml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return p


def _first(doc, cid="second_order_slope"):
    return next(c for c in doc["paper_a"]["claims"] if c["id"] == cid)


MALFORMED = {
    "no tolerance": (lambda d: _first(d).pop("tolerance"), "second_order_slope.*tolerance"),
    "bad tolerance": (lambda d: _first(d).update(tolerance={"percent": 5}), "second_order_slope.*tolerance"),
    "factor below 1": (lambda d: _first(d).update(tolerance={"factor": 0.5}), "factor"),
    "unknown form": (lambda d: _first(d).update(form="roughly"), "second_order_slope.*form"),
    "no why": (lambda d: _first(d).pop("why"), "second_order_slope.*why"),
    "no english": (lambda d: _first(d).pop("english"), "second_order_slope.*english"),
    "beyond not a flag": (lambda d: _first(d).update(beyond="yes"), "second_order_slope.*beyond"),
    "ordered with a rel tolerance": (
        lambda d: _first(d, "baselines_faster_than_cert").update(tolerance={"rel": 0.1}),
        "baselines_faster_than_cert.*ordered",
    ),
    "not_checked without english": (lambda d: d["paper_a"]["not_checked"][0].pop("english"), "not_checked"),
    "band lo > hi": (lambda d: _first(d, "crown_over_cert_fixed").update(value=[4.7, 3.8]), "crown_over_cert_fixed"),
    "text where a number is compared": (lambda d: _first(d).update(value="about two"), "second_order_slope.*number"),
    "better against the limit": (lambda d: _first(d, "exact_bracket_width").update(better="higher"), "contradicts"),
    "bad direction": (lambda d: _first(d).update(direction=[3, 1]), "direction"),
    "depends on a non-setup claim": (lambda d: _first(d).update(depends_on=["first_order_slope"]), "not a setup claim"),
    "unknown field": (lambda d: _first(d).update(agree={"kind": "range"}), "unknown field.*agree"),
    "ordered with one key": (lambda d: _first(d, "crown_ratio_grows_varying").update(measured=["a"]), "ordered"),
    "duplicate id": (
        lambda d: d["paper_b"]["claims"].append(dict(_first(d))),
        "duplicate claim id.*second_order_slope",
    ),
    "missing section": (lambda d: d.pop("paper_b"), "top level"),
    "no model": (lambda d: d["paper_a"]["grid"].pop("model"), "grid.model"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_claims_file_fails_in_one_line(tmp_path, name):
    mutate, pattern = MALFORMED[name]
    path = _mutated(tmp_path, mutate)
    with pytest.raises(ClaimsError, match=pattern) as err:
        load_claims(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(path))


def test_invalid_yaml_fails_in_one_line(tmp_path):
    p = tmp_path / "claims.yaml"
    p.write_text("paper_a: [unclosed\n  - x: :\n")
    with pytest.raises(ClaimsError, match="not valid YAML") as err:
        load_claims(p)
    assert "\n" not in str(err.value)
