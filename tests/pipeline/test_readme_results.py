"""The README's verdict tally and docs/results.md are what data/paper_claims.yaml and
data/reference_run.json render to."""
import json
from pathlib import Path

import pytest

from attncert.pipeline.readme_results import BEGIN, END, from_snapshot, main, splice

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT, CLAIMS = REPO / "data" / "reference_run.json", REPO / "data" / "paper_claims.yaml"


def test_readme_tally_is_generated_from_the_claims_and_the_reference_run():
    readme = (REPO / "README.md").read_text()
    block, _ = from_snapshot(SNAPSHOT, CLAIMS)
    assert splice(readme, block) == readme, (
        "README.md's verdict tally differs from the generated one: run "
        "`python -m attncert.pipeline.readme_results` from the repository root")


def test_results_page_is_generated_from_the_claims_and_the_reference_run():
    _, results = from_snapshot(SNAPSHOT, CLAIMS)
    assert (REPO / "docs" / "results.md").read_text() == results, (
        "docs/results.md differs from the generated one: run `python -m attncert.pipeline.readme_results`")


def test_tally_counts_every_claim_once_and_names_the_model():
    block, results = from_snapshot(SNAPSHOT, CLAIMS)
    snap = json.loads(SNAPSHOT.read_text())
    n_rows = sum(1 for line in results.splitlines() if line.startswith("| ") and not line.startswith("| id "))
    total = int(block.split(" claims,")[0].strip("*"))
    assert total == n_rows > 0
    assert snap["model"] in block and snap["model"] in results and "docs/results.md" in block
    counts = [int(x.rsplit(" ", 1)[1]) for x in block.split(":** ", 1)[1].split(". ", 1)[0].split(", ")]
    assert sum(counts) == total


def test_check_reports_a_stale_results_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "docs").mkdir()
    for src in (SNAPSHOT, CLAIMS):
        (tmp_path / "data" / src.name).write_text(src.read_text())
    (tmp_path / "README.md").write_text(f"intro\n{BEGIN}\nold\n{END}\n")
    assert main(["--check"]) == 1
    assert main([]) == 0 and main(["--check"]) == 0
    (tmp_path / "docs" / "results.md").write_text("hand-edited\n")
    assert main(["--check"]) == 1


def test_splice_replaces_only_the_block():
    text = f"intro\n{BEGIN}\nold numbers\n{END}\noutro\n"
    assert splice(text, "new") == f"intro\n{BEGIN}\nnew\n{END}\noutro\n"
    with pytest.raises(ValueError, match="markers"):
        splice("no markers here", "new")
    with pytest.raises(ValueError, match="markers"):
        splice(f"{END}\n{BEGIN}", "new")
