"""The run's overview (the report's first item and landing page): every number it gives equals the one in the run's
own files (recorded configuration, benchmark wall times, paper vs reproduced, audit), and it says plainly which
model the run is, GPT-2 or not."""
import csv
import re

import pytest
import yaml

from attncert.audit.audit_table import STATUSES
from attncert.audit.run_configuration import write_run_configuration
from attncert.integrity.intermediate_check import IntermediateError
from attncert.paper_comparison.verdict import KINDS
from attncert.provenance.provenance import provenance, write_sidecar
from attncert.reporting import run_overview as ro
from conftest import REPO

MODEL = "m"
#: (benchmark file under benchmarks/, wall time s): two layers of certification and the method checks, extraction,
#: audit, Min-IP (under its grid's name)
BENCH = {f"{MODEL}/certify/layer0.tsv": 61.5, f"{MODEL}/certify/layer1.tsv": 122.25,
         f"{MODEL}/extract/layer0.tsv": 7.0, f"{MODEL}/audit.tsv": 30.0, f"{MODEL}/audit_certificates.tsv": 95.5,
         "minip/default/train/witness/r8.tsv": 4.0, "minip/default/collect.tsv": 1.0,
         f"{MODEL}/method_checks.tsv": 12.0}
VERDICTS = [("A", "reproduced", "False")] * 3 + [("A", "qualitative", "False")] * 2 + [("A", "n/a", "False")] \
    + [("B", "differs", "False"), ("B", "set-up differs", "False")] + [("A", "qualitative", "True")] * 4
AUDIT = ["pass"] * 7 + ["not applicable"] * 2 + ["not covered"]


def _config() -> dict:
    cfg = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
    cfg["model"]["name"] = MODEL
    return cfg


@pytest.fixture
def run(tmp_path):
    """A finished run's files: recorded configuration, benchmarks, paper vs reproduced, audit (each with a sidecar
    where the workflow writes one)."""
    config = tmp_path / "data" / "run" / MODEL / "config.yaml"
    config.parent.mkdir(parents=True)
    write_run_configuration(config, _config(), {"layers": list(range(6)), "heads": list(range(12)),
                                                "block_transitions": list(range(5))})
    write_sidecar(config, provenance({"code": "t"}, stage="run_configuration", model_id=MODEL))
    benches = []
    for rel, seconds in BENCH.items():
        p = tmp_path / "benchmarks" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:00\t100.0\n")
        benches.append(p)
    verdicts = tmp_path / "paper_vs_reproduced.csv"
    with open(verdicts, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["paper", "id", "verdict", "beyond"])
        w.writerows([(p, f"c{i}", v, b) for i, (p, v, b) in enumerate(VERDICTS)])
    write_sidecar(verdicts, provenance({"code": "t"}, stage="paper_vs_reproduced"))
    audit = tmp_path / "audit.csv"
    audit.write_text("table,status,check\n" + "".join(f"certify,{s},x\n" for s in AUDIT))
    write_sidecar(audit, provenance({"code": "t"}, stage="audit"))
    return dict(config_path=config, benchmarks=benches, verdicts=verdicts, audit=audit)


def test_every_number_comes_from_the_runs_files(run):
    ov = ro.overview(**run, configfiles=["workflow/config/default.yaml"], overrides={"model_source": "DIR"})
    times = ov.times.set_index("stage")
    assert times.loc["certification", "seconds"] == 61.5 + 122.25 + 12.0  # the method checks count to it
    assert times.loc["certification", "jobs"] == 3 and times.loc["certification", "longest"] == "certify/layer1"
    assert times.loc["audit", "seconds"] == 30.0 + 95.5 and times.loc["Min-IP (Paper B)", "jobs"] == 2
    assert times["seconds"].sum() == sum(BENCH.values()) and times["jobs"].sum() == len(BENCH)
    assert ov.verdicts["Paper A"] == {"reproduced": 3, "stronger": 0, "qualitative": 2, "differs": 0,
                                      "set-up differs": 0, "n/a": 1}  # "n/a" is a verdict, not a missing value
    assert ov.verdicts["Paper B"]["differs"] == 1 and ov.verdicts["Paper B"]["set-up differs"] == 1
    assert ov.verdicts["beyond the paper"]["qualitative"] == 4 and sum(ov.verdicts["beyond the paper"].values()) == 4
    assert ov.audit == {"pass": 7, "fail": 0, "not applicable": 2, "not covered": 1}
    grid = {stage: (n, noun) for stage, _, n, noun in ov.grid}
    c = _config()["certify"]
    assert grid["certification"] == (6 * 12 * len(c["prompts"]) * len(c["query_positions"]) * len(c["radii"])
                                     * len(c["norms"]) * len(c["modes"]), "units")
    assert grid["block residual"] == (5 * 12 * len(_config()["block"]["radii"]), "rows (unit × radius)")
    text = ro.overview_markdown(ov)
    assert "**passed**: no audited number failed (10 audited numbers: pass 7, fail 0, not applicable 2, " \
           "not covered 1)" in text
    assert "- Paper A (6 claims): reproduced 3, stronger 0, qualitative 2, differs 0, set-up differs 0, n/a 1" in text
    assert "(8 claims of the papers" in text and "beyond the paper (4 claims)" in text
    assert f"{ro.duration(sum(BENCH.values()))} summed over {len(BENCH)} benchmarked jobs" in text
    assert "`workflow/config/default.yaml`, with --config `model_source=DIR`" in text
    assert f"— {grid['certification'][0]:,} units" in text


def test_the_default_configuration_gives_the_documented_grid():
    """The default grid as the README and workflow/config/README.md give it: 1,728 certification units."""
    cfg = {**_config(), "resolved": {"layers": list(range(6)), "heads": list(range(12)), "block_transitions": [0]}}
    rows = {stage: n for stage, _, n, _ in ro.grid_rows(cfg)}
    assert rows["certification"] == 1728 and rows["long context"] == 80 and rows["Min-IP (Paper B)"] == 123


def test_a_failed_audit_number_says_failed(run, tmp_path):
    run["audit"].write_text("table,status\ncertify,pass\nblock,fail\n")
    write_sidecar(run["audit"], provenance({"code": "t"}, stage="audit"))
    text = ro.overview_markdown(ro.overview(**run))
    assert "**FAILED**: 1 numbers failed" in text and "passed" not in text


def test_an_altered_table_is_refused(run):
    run["verdicts"].write_text(run["verdicts"].read_text().replace("differs", "reproduced"))
    with pytest.raises(IntermediateError, match="paper_vs_reproduced.csv is corrupted"):
        ro.overview(**run)


@pytest.mark.parametrize("source, says", [
    ("embedded", "**not GPT-2**"), ("random-gpt2", "SYNTHETIC"), ("gpt2", "GPT-2 small from the hub id `gpt2`"),
    ("/some/dir", "checkpoint in `/some/dir` (GPT-2 small only if that folder holds it")])
def test_the_model_is_named_plainly(source, says):
    text = ro.model_statement({"name": "x", "source": source, "family": "gpt2"})
    assert says in text
    assert ("not GPT-2" in text) == (source in ("embedded", "random-gpt2"))


def test_the_orders_are_those_of_the_verdicts_and_the_audit():
    assert ro.VERDICTS == KINDS and ro.AUDIT_STATUSES == STATUSES


def test_the_html_fragment_is_scoped_and_titled_below_the_landing_page(run, tmp_path):
    ov = ro.overview(**run)
    ro.write_overview(ov, tmp_path / "o.md", tmp_path / "o.html")
    html = (tmp_path / "o.html").read_text()
    assert html.startswith('<div class="attncert-overview">') and "<h1>" not in html
    assert all(rule.strip().startswith(".attncert-overview") for rule in re.findall(r"^[^<{}]+\{", html, re.M))
    assert "<li>Paper A (6 claims)" in html and (tmp_path / "o.md").read_text().startswith(f"# Run overview — {MODEL}")
