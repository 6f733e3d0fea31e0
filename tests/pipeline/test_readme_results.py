"""The README's results section is what data/paper_claims.yaml and data/reference_run.json render to."""
from pathlib import Path

import pytest

from attncert.pipeline.readme_results import BEGIN, END, from_snapshot, splice

REPO = Path(__file__).resolve().parents[2]


def test_readme_results_section_is_generated_from_the_claims_and_the_reference_run():
    readme = (REPO / "README.md").read_text()
    block = from_snapshot(REPO / "data" / "reference_run.json", REPO / "data" / "paper_claims.yaml")
    assert splice(readme, block) == readme, (
        "README.md's results section differs from the generated one: run "
        "`python -m attncert.pipeline.readme_results` from the repository root")


def test_splice_replaces_only_the_block():
    text = f"intro\n{BEGIN}\nold numbers\n{END}\noutro\n"
    assert splice(text, "new") == f"intro\n{BEGIN}\nnew\n{END}\noutro\n"
    with pytest.raises(ValueError, match="markers"):
        splice("no markers here", "new")
    with pytest.raises(ValueError, match="markers"):
        splice(f"{END}\n{BEGIN}", "new")
