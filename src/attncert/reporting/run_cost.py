"""What one measured `make run` cost: the README's timing sentence, generated from a record, never typed by hand.

A record (`data/reference_run.json`'s "run") holds

    wall_seconds   wall time of `snakemake --cores all` (the pipeline alone)
    setup_seconds  wall time of `make setup` before it (creating .venv and installing)
    cpu_seconds    user + system CPU seconds of the pipeline's process tree (Snakemake and every job), from the
                   timing file; None for a timing file without it. Not the benchmarks' `cpu_time`: Snakemake
                   samples it every 0.5 s for a job's first 15 s and then every 30 s, so a 32 s job reads ~15 s
    job_seconds    sum over the same jobs of their wall times (column `s`)
    jobs           number of benchmarked jobs (one benchmark file each; rules without a benchmark are not counted)
    cores          cores of the machine that ran it

`record_from_run(timing, benchmark_files, cores)` builds it from the timing file `make run` writes (one line
`setup <seconds> run <seconds> cpu <seconds> rc <code>`, the cpu field optional) and the run's benchmark files
(benchmarks/**/*.tsv);
`sentence(record)` is the sentence the README quotes. A run that failed (rc != 0) is refused: its times would
not be a run's.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from attncert.reporting.duration_text import duration

KEYS = ("wall_seconds", "setup_seconds", "cpu_seconds", "job_seconds", "jobs", "cores")


def read_timing(path: str | Path) -> tuple[float, float, float | None]:
    """(setup seconds, run seconds, pipeline CPU seconds or None) of a timing file `setup S run R [cpu C] rc X` (the
    line `make run` writes)."""
    path = Path(path)
    try:
        words = path.read_text(encoding="utf-8").split()
    except OSError as e:
        raise ValueError(f"cannot read the timing file {path}: {e.strerror}") from None
    fields = dict(zip(words[0::2], words[1::2]))
    if len(words) not in (6, 8) or set(fields) - {"cpu"} != {"setup", "run", "rc"} or len(fields) * 2 != len(words):
        raise ValueError(f"{path}: expected one line 'setup <seconds> run <seconds> cpu <seconds> rc <code>', "
                         f"got {' '.join(words)!r}")
    try:
        setup, run, rc = float(fields["setup"]), float(fields["run"]), int(fields["rc"])
        cpu = float(fields["cpu"]) if "cpu" in fields else None
    except ValueError:
        raise ValueError(f"{path}: setup, run and cpu must be seconds and rc an integer, "
                         f"got {' '.join(words)!r}") from None
    if rc != 0:
        raise ValueError(f"{path}: the run failed (rc {rc}); only a finished run's times are recorded")
    if not (math.isfinite(setup) and math.isfinite(run) and setup >= 0 and run > 0):
        raise ValueError(f"{path}: setup must be >= 0 and run > 0 seconds, got setup {setup} run {run}")
    if cpu is not None and not (math.isfinite(cpu) and cpu >= 0):
        raise ValueError(f"{path}: cpu must be >= 0 seconds, got {cpu}")
    return setup, run, cpu


def job_totals(paths) -> tuple[float, int]:
    """(sum of the wall seconds `s`, number of files) over Snakemake benchmark files."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("no benchmark files (benchmarks/**/*.tsv): give the folder of a finished run")
    wall = 0.0
    for p in paths:
        try:
            table = pd.read_csv(p, sep="\t")
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
            raise ValueError(f"cannot read the benchmark file {p}: {e}") from None
        if "s" not in table.columns or "cpu_time" not in table.columns or table.empty:
            raise ValueError(f"{p}: not a Snakemake benchmark file (needs rows and the columns s, cpu_time)")
        wall += float(table["s"].sum())
    return wall, len(paths)


def benchmark_files(folders) -> list[Path]:
    """Every *.tsv under the given folders, sorted."""
    return sorted(p for f in map(Path, folders) for p in f.rglob("*.tsv"))


def record_from_run(timing: str | Path, benchmarks, cores: int) -> dict:
    """The "run" record of one measured run (see the module docstring)."""
    setup, wall, cpu = read_timing(timing)
    job_wall, jobs = job_totals(benchmarks)
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    return {"wall_seconds": round(wall, 1), "setup_seconds": round(setup, 1),
            "cpu_seconds": None if cpu is None else round(cpu, 1),
            "job_seconds": round(job_wall, 1), "jobs": jobs, "cores": int(cores)}


def sentence(record: dict) -> str:
    """The README's timing sentence for a record."""
    missing = [k for k in KEYS if k not in record]
    if missing:
        raise ValueError(f"the run record lacks {', '.join(missing)}; fill it from a measured run")
    return (f"`make run`, fresh clone, {record['cores']} cores: set-up {duration(record['setup_seconds'])}, pipeline "
            f"{duration(record['wall_seconds'])} ({record['jobs']} timed jobs"
            + ("" if record["cpu_seconds"] is None else f", {duration(record['cpu_seconds'])} CPU") + ").")
