"""The README's verdict tally and docs/results.md are what data/paper_claims.yaml and
data/reference_run.json render to."""
import json
import re
from pathlib import Path

import pytest

from attncert.paper_comparison.claims import load_claims
from attncert.paper_comparison.readme_results import BEGIN, END, RUN_BEGIN, RUN_END, from_snapshot, main, splice
from attncert.reporting.run_cost import sentence
from attncert.paper_comparison.sentence_tally import least_favourable

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT, CLAIMS = REPO / "data" / "reference_run.json", REPO / "data" / "paper_claims.yaml"


def test_readme_tally_is_generated_from_the_claims_and_the_reference_run():
    readme = (REPO / "README.md").read_text()
    block, _ = from_snapshot(SNAPSHOT, CLAIMS)
    assert splice(readme, block) == readme, (
        "README.md's verdict tally differs from the generated one: run "
        "`python -m attncert.paper_comparison.readme_results` from the repository root")


def test_results_page_is_generated_from_the_claims_and_the_reference_run():
    _, results = from_snapshot(SNAPSHOT, CLAIMS)
    assert (REPO / "docs" / "results.md").read_text() == results, (
        "docs/results.md differs from the generated one: run `python -m attncert.paper_comparison.readme_results`")


def test_tally_counts_every_sentence_once_and_names_the_model():
    block, results = from_snapshot(SNAPSHOT, CLAIMS)
    snap = json.loads(SNAPSHOT.read_text())
    claims = load_claims(CLAIMS).claims
    paper = [c for c in claims if not c.beyond]
    n_rows = sum(1 for line in results.splitlines() if line.startswith("| ") and not line.startswith("| id "))
    assert n_rows == len(claims)
    sentences, n_claims = re.match(r"\*\*(\d+) sentences of the papers \((\d+) claims; ", block).groups()
    assert int(sentences) == len({(c.paper, c.sentence) for c in paper}) < len(paper) == int(n_claims)
    # the results page has one row per claim, the papers' and the variants': the block says how the two counts relate
    rows = re.search(r"Per claim \((\d+) rows: the (\d+) and (\d+) variants beyond the papers\)", block).groups()
    assert [int(x) for x in rows] == [len(claims), len(paper), len(claims) - len(paper)]
    assert snap["model"] in block and snap["model"] in results and "docs/results.md" in block
    counts = [int(x.rsplit(" ", 1)[1]) for x in block.split(":** ", 1)[1].split(". ", 1)[0].split(", ")]
    assert sum(counts) == int(sentences)
    beyond = re.search(r"Beyond the paper \((\d+) variants, tallied apart\): (.*)", block)
    assert int(beyond.group(1)) == sum(c.beyond for c in claims) == sum(int(x.rsplit(" ", 1)[1])
                                                                      for x in beyond.group(2).split(", "))
    # the capped sentence names no verdict word with a count that could be read as a second tally
    capped = re.search(r"(\d+) of the (\d+) qualitative ones .*?(\d+) within tolerance, (\d+) beyond", block)
    assert int(capped.group(1)) == int(capped.group(3)) + int(capped.group(4)) <= int(capped.group(2))
    assert "uncapped:" not in block


def test_least_favourable_verdict_per_sentence():
    assert least_favourable(["reproduced", "differs", "stronger"]) == "differs"
    assert least_favourable(["reproduced", "n/a"]) == "reproduced" and least_favourable(["n/a", "n/a"]) == "n/a"
    assert least_favourable(["stronger", "qualitative"]) == "qualitative"


def test_check_reports_a_stale_results_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "docs").mkdir()
    for src in (SNAPSHOT, CLAIMS):
        (tmp_path / "data" / src.name).write_text(src.read_text())
    (tmp_path / "README.md").write_text(f"intro\n{RUN_BEGIN}\n{RUN_END}\n{BEGIN}\nold\n{END}\n")
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


def test_readme_timing_is_what_the_reference_run_records():
    """The README's timing sentence quotes the measured run recorded in data/reference_run.json, nothing typed."""
    readme = (REPO / "README.md").read_text()
    run = json.loads(SNAPSHOT.read_text())["run"]
    assert readme.split(RUN_BEGIN)[1].split(RUN_END)[0].strip("\n") == sentence(run), (
        "README.md's timing differs from data/reference_run.json's run record: run "
        "`python -m attncert.paper_comparison.readme_results` from the repository root")
    assert run["wall_seconds"] > 0 and run["setup_seconds"] > 0 and run["cpu_seconds"] > 0 and run["jobs"] > 0


def _bench(root, seconds, cpu):
    path = root / "benchmarks" / "m" / "certify" / "layer0.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\tcpu_time\n{seconds}\t0:10:00\t{cpu}\n")


def test_a_measured_run_fills_the_run_record_and_adopting_a_snapshot_keeps_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for d in ("data", "docs"):
        (tmp_path / d).mkdir()
    snap = json.loads(SNAPSHOT.read_text())
    (tmp_path / "data" / CLAIMS.name).write_text(CLAIMS.read_text())
    (tmp_path / "data" / SNAPSHOT.name).write_text(json.dumps(snap))
    (tmp_path / "README.md").write_text(f"intro\n{RUN_BEGIN}\nold\n{RUN_END}\n{BEGIN}\nold\n{END}\n")
    _bench(tmp_path, 600.0, 1150.0)
    (tmp_path / "timing").write_text("setup 70 run 700 cpu 1150 rc 0\n")
    assert main(["--timing", "timing", "--cores", "2"]) == 0 and main(["--check"]) == 0
    run = {"wall_seconds": 700.0, "setup_seconds": 70.0, "cpu_seconds": 1150.0, "job_seconds": 600.0, "jobs": 1,
           "cores": 2}
    assert json.loads((tmp_path / "data" / SNAPSHOT.name).read_text())["run"] == run
    assert sentence(run) in (tmp_path / "README.md").read_text()
    # another run's snapshot replaces the measured values, not the run's cost
    other = dict(snap, provenance={**snap["provenance"], "created_utc": "another run"})
    other.pop("run", None)
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert main(["other.json"]) == 0
    adopted = json.loads((tmp_path / "data" / SNAPSHOT.name).read_text())
    assert adopted["run"] == run and adopted["provenance"]["created_utc"] == "another run"
    # a failed run is refused in one line and changes nothing
    before = (tmp_path / "data" / SNAPSHOT.name).read_text()
    (tmp_path / "timing").write_text("setup 70 run 700 rc 1\n")
    assert main(["--timing", "timing"]) == 2
    assert "the run failed" in capsys.readouterr().err
    assert (tmp_path / "data" / SNAPSHOT.name).read_text() == before
