"""bench.paper_run_summary reads a run's directory: units against the config, lost units, violations, failed jobs."""
from conftest import REPO

from bench.paper_run_summary import merged_config, summarize

MODEL = "all-MiniLM-L6-v2"


def test_summary_counts_units_violations_and_failed_jobs(tmp_path):
    cfg = merged_config([str(REPO / "workflow" / "config" / "default.yaml")])
    certify = tmp_path / "data" / "certify" / MODEL
    certify.mkdir(parents=True)
    (certify / "layer0.csv").write_text("layer,status,error\n0,ok,\n0,UNSOUND,x\n0,fallback,second_order: fallback to "
                                        "first order (why)\n")
    bench = tmp_path / "benchmarks" / MODEL / "certify"
    bench.mkdir(parents=True)
    (bench / "layer0.tsv").write_text("s\th:m:s\tmax_rss\tcpu_time\n36.0\t0:00:36\t1\t30.0\n")
    for grid, seconds in (("default", 4.0), ("paper", 400.0)):  # the paper grid's Min-IP jobs are another run's
        minip = tmp_path / "benchmarks" / "minip" / grid
        minip.mkdir(parents=True)
        (minip / "collect.tsv").write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{seconds}\t0:00:04\t1\t{seconds}\n")
        runs = tmp_path / "data" / "minip" / grid / "runs" / "witness"
        runs.mkdir(parents=True)
        for name in ("r1_s0.json", "r1_s0.json.json"):
            (runs / name).write_text("{}")
    logs = tmp_path / ".snakemake" / "log"
    logs.mkdir(parents=True)
    (logs / "2026.snakemake.log").write_text("Error in rule certify_layer:\n    jobid: 3\n")
    result, lines = summarize(tmp_path, cfg, {"hours": {"certify": {"after": 0.5}, "total_after": 1.0}})
    assert result["present"]["certify"] == 3 and result["expected"]["certify"] == 1728
    assert result["unsound"] == 1 and result["failed_jobs"] == ["certify_layer"]
    assert result["fallbacks"] == {"second_order: fallback to first order": 1}
    assert result["times"]["certify"]["jobs"] == 1 and abs(result["cpu_hours"] - 34.0 / 3600) < 1e-12
    assert result["times"]["minip"]["jobs"] == 1 and result["times"]["minip"]["wall_s"] == 4.0
    assert result["present"]["minip"] == 1
    row = next(line for line in lines if line.startswith("| certify |"))
    assert "3 / 1,728" in row and "| 1,725 |" in row and "0.50" in row


def test_merged_config_starts_from_the_default_like_snakemake(tmp_path):
    """A key the given files leave out keeps default.yaml's value, as in the run itself."""
    partial = tmp_path / "partial.yaml"
    partial.write_text("certify:\n  radii: [0.0005, 0.001, 0.002, 0.005, 0.01]\n")
    cfg = merged_config([str(partial)])
    assert cfg["certify"]["radii"] == [0.0005, 0.001, 0.002, 0.005, 0.01]
    assert cfg["certify"]["prompts"] == [0, 1]  # default.yaml's, not every prompt
