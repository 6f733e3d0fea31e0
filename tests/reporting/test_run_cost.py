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


def _timing(path, text="setup 83.46 run 671.2 rc 0\n"):
    path.write_text(text)
    return path


def test_record_sums_the_benchmarked_jobs_and_takes_the_timing_line(tmp_path):
    files = benchmark_files([_benchmarks(tmp_path)])
    assert len(files) == len(JOBS)
    record = record_from_run(_timing(tmp_path / "t"), files, cores=2)
    assert record == {"wall_seconds": 671.2, "setup_seconds": 83.5, "cpu_seconds": 128.5, "job_seconds": 72.5,
                      "jobs": 3, "cores": 2}
    assert sentence(record) == ("`make run`, fresh clone, 2 cores: set-up 84 s, pipeline 11.2 min "
                                "(3 timed jobs, 2.1 min CPU).")


@pytest.mark.parametrize("text, message", [
    ("setup 83 run 671 rc 1", "the run failed"),
    ("setup 83 run 671", "expected one line"),
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
