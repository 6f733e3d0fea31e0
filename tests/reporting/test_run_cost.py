"""The cost record of a measured `make run` (attncert.reporting.run_cost): read from the timing line `make run`
writes and the run's Snakemake benchmark files, a failed or malformed run refused with a one-line error."""
import pytest

from attncert.reporting.run_cost import benchmark_files, job_totals, read_timing, record_from_run, sentence

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
#: benchmark file -> (wall seconds s, cpu_time): two stages and a Min-IP job in a nested folder
JOBS = {"m/certify/layer0.tsv": (61.5, 118.25), "m/extract/layer0.tsv": (7.0, 6.5),
        "minip/default/train/witness/r8.tsv": (4.0, 3.75)}


def _benchmarks(root):
    for name, (s, cpu) in JOBS.items():
        path = root / "benchmarks" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + f"{s}\t0:00:{int(s):02d}\t700.0\t1400.0\t500.0\t600.0\t40.0\t5.0\t95.0\t{cpu}\n")
    return root / "benchmarks"


def _timing(path, text="setup 83.46 run 671.2 cpu 1290.04 rc 0\n"):
    path.write_text(text)
    return path


def test_record_sums_the_benchmarked_jobs_and_takes_the_timing_line(tmp_path):
    files = benchmark_files([_benchmarks(tmp_path)])
    assert len(files) == len(JOBS)
    record = record_from_run(_timing(tmp_path / "t"), files, cores=2)
    assert record == {"wall_seconds": 671.2, "setup_seconds": 83.5, "cpu_seconds": 1290.0, "job_seconds": 72.5,
                      "jobs": 3, "cores": 2}
    assert sentence(record) == ("`make run`, fresh clone, 2 cores: set-up 84 s, pipeline 11.2 min "
                                "(3 timed jobs, 21.5 min CPU).")


def test_a_timing_line_without_cpu_gives_no_cpu_figure(tmp_path):
    """The benchmarks' sampled cpu_time is never summed in its place (it reads ~15 s for a 32 s job)."""
    record = record_from_run(_timing(tmp_path / "t", "setup 83.46 run 671.2 rc 0\n"),
                             benchmark_files([_benchmarks(tmp_path)]), cores=2)
    assert record["cpu_seconds"] is None
    assert sentence(record) == "`make run`, fresh clone, 2 cores: set-up 84 s, pipeline 11.2 min (3 timed jobs)."


def test_the_makefile_timing_line_parses(tmp_path):
    """workflow/cpu_of_times.awk turns two `times` outputs into the line read_timing reads."""
    import subprocess
    from pathlib import Path

    awk = Path(__file__).resolve().parents[2] / "workflow" / "cpu_of_times.awk"
    (tmp_path / "b").write_text("0m0.01s 0m0.00s\n0m1.50s 0m0.25s\n")
    (tmp_path / "a").write_text("0m0.02s 0m0.00s\n21m3.25s 1m0.50s\n")
    out = subprocess.run(["awk", "-v", "a=0", "-v", "b=30.25", "-v", "c=700", "-v", "rc=0", "-f", str(awk),
                          str(tmp_path / "b"), str(tmp_path / "a")], capture_output=True, text=True, check=True).stdout
    assert out == "setup 30.2 run 669.8 cpu 1322.0 rc 0\n"
    assert read_timing(_timing(tmp_path / "t", out)) == (30.2, 669.8, 1322.0)


@pytest.mark.parametrize("text, message", [
    ("setup 83 run 671 rc 1", "the run failed"),
    ("setup 83 run 671", "expected one line"),
    ("setup 83 run 671 cpu 9 cpu 9 rc 0", "expected one line"),
    ("setup 83 run 671 cpu -1 rc 0", "cpu must be >= 0"),
    ("setup x run 671 rc 0", "must be seconds"),
    ("setup 83 run 0 rc 0", "run > 0"),
    ("setup nan run 671 rc 0", "setup must be >= 0"),
])
def test_a_failed_or_malformed_timing_line_is_refused(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        read_timing(_timing(tmp_path / "t", text))


def test_missing_files_and_foreign_tables_are_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot read the timing file"):
        read_timing(tmp_path / "absent")
    with pytest.raises(ValueError, match="no benchmark files"):
        job_totals(benchmark_files([tmp_path]))
    (tmp_path / "other.tsv").write_text("a\tb\n1\t2\n")
    with pytest.raises(ValueError, match="not a Snakemake benchmark file"):
        job_totals([tmp_path / "other.tsv"])
    with pytest.raises(ValueError, match="lacks cpu_seconds"):
        sentence({"wall_seconds": 1.0, "setup_seconds": 1.0, "job_seconds": 1.0, "jobs": 1, "cores": 2})
