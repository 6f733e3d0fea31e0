"""The default and the paper configuration coexist in one clone: no output, log or benchmark path of one run is a path
of the other (the transformer stages carry the model's name, Min-IP its grid's `minip.name`). Read off the jobs of
both dry runs (`--forceall`: every job of the DAG, whatever is on disk). Slow: two dry runs of the whole DAG, about
20 s on 2 cores."""
import os
import re
import subprocess

import pytest

from attncert.provenance.run_archive import benchmark_of, run_name
from conftest import REPO, SNAKEMAKE

JOB = re.compile(r"^\s*(?:local)?rule (\w+):$")
FIELD = re.compile(r"^\s+(output|log|benchmark): (.+)$")


def planned_jobs(*args: str) -> list[dict]:
    """[{rule, output, log, benchmark}] of every job of the DAG, from a dry run of the repository's workflow."""
    res = subprocess.run([SNAKEMAKE, "-n", "--forceall", "--cores", "1", *args], cwd=REPO, capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO / "src")))
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    jobs = []
    for line in res.stdout.splitlines():
        if m := JOB.match(line):
            jobs.append({"rule": m.group(1), "output": [], "log": [], "benchmark": []})
        elif (m := FIELD.match(line)) and jobs:
            jobs[-1][m.group(1)] += [p.strip() for p in m.group(2).split(",")]
    return jobs


def all_paths(jobs) -> set[str]:
    return {p for job in jobs for kind in ("output", "log", "benchmark") for p in job[kind]}


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs():
    return {"default": planned_jobs(), "paper": planned_jobs("--configfile", "workflow/config/paper.yaml")}


def test_the_default_and_paper_runs_share_no_path(runs):
    default, paper = all_paths(runs["default"]), all_paths(runs["paper"])
    assert len(default) > 500 and len(paper) > 2000  # every job, not a plan emptied by finished outputs
    for paths, grid in ((default, "default"), (paper, "paper")):
        assert f"data/minip/{grid}/sweep.csv" in paths and f"figures/tables/minip/{grid}/minip_measured.json" in paths
        assert any(p.startswith(f"data/logs/minip/{grid}/") for p in paths)
        assert any(p.startswith(f"benchmarks/minip/{grid}/") for p in paths)
    shared = sorted(default & paper)
    assert not shared, f"{len(shared)} paths of both runs, e.g. {shared[:5]}"


def test_every_path_carries_the_runs_model_or_grid(runs):
    """What an archive is named by (`run_archive.run_name`): the names every path of the run carries."""
    assert run_name(all_paths(runs["default"])) == "all-MiniLM-L6-v2_minip-default"
    assert run_name(all_paths(runs["paper"])) == "gpt2_minip-paper"


def test_every_benchmark_sits_beside_its_log(runs):
    """An archive takes each job's benchmark from its log's path (`run_archive.benchmark_of`)."""
    jobs = [j for r in runs.values() for j in r if j["benchmark"]]
    assert len(jobs) > 100
    for job in jobs:
        assert [benchmark_of(log) for log in job["log"]] == job["benchmark"], job
