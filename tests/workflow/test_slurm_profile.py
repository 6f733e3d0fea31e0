"""The SLURM profile against a real SLURM: a single-node cluster from Debian's packages, brought up by
workflow/cluster/slurm_single_node.sh (apt-get install as root when missing), runs a reduced DAG through
workflow/profiles/slurm; the outputs must equal those of the same targets run locally, apart from
timing columns and timestamps. Every daemon the script started is stopped by PID, also on failure.

Needs root and apt-get (or the packages installed). Without them the test fails with one line saying
why; it never skips. Deselect it on a developer machine with `pytest -m "not cluster"`.
"""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from bench.slurm_profile import TARGETS, reduced_config
from conftest import REPO, SNAKEMAKE

pytestmark = pytest.mark.cluster

SCRIPT = REPO / "workflow" / "cluster" / "slurm_single_node.sh"
PROFILE = REPO / "workflow" / "profiles" / "slurm"
FAST_STATUS_CHECKS = ("--slurm-init-seconds-before-status-checks", "1", "--seconds-between-status-checks", "2")
PARTITION = "attncert"  # the script's partition; not the default, so the profile must pass it on

# columns and keys that hold wall-clock time or a timestamp (they differ between any two runs):
# seconds, median_seconds, certificate_seconds_over_method_seconds, t_exact_s, median_t_first_s, created_utc
TIMING = re.compile(r"seconds|(^|_)t_\w+_s$|(^|_)(time|created_utc|elapsed)(_|$)", re.I)
WORDED_TIMING = re.compile(r"\b(time|seconds)\b", re.I)  # a Markdown header in words ("median time, method (s)")


_capture = None  # pytest's capture manager: the log lines are shown even when the test passes


def _log(line: str) -> None:
    if _capture is not None:
        with _capture.global_and_fixture_disabled():
            print(f"[cluster test] {line}", file=sys.stderr, flush=True)
    else:
        print(f"[cluster test] {line}", file=sys.stderr, flush=True)


def _snakemake(workdir: Path, configfile: Path, *extra: str, env: dict, timeout: int) -> tuple[int, str, float]:
    cmd = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(configfile), *extra, *TARGETS]
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole Snakemake process group, by its id
        out, _ = proc.communicate()
        out += f"\n[cluster test] killed after {timeout} s"
    return proc.returncode, out, time.time() - t0


def _outputs(workdir: Path) -> dict[str, Path]:
    """Every file the DAG produced: data/ and figures/ minus logs (the inputs copied in are equal)."""
    out = {}
    for top in ("data", "figures"):
        for p in (workdir / top).rglob("*"):
            rel = p.relative_to(workdir).as_posix()
            if p.is_file() and not rel.startswith("data/logs/") and not p.name.startswith("."):
                out[rel] = p
    return out


def _strip_timing(obj):
    if isinstance(obj, dict):
        return {k: _strip_timing(v) for k, v in obj.items() if not TIMING.search(str(k))}
    if isinstance(obj, list):
        return [_strip_timing(v) for v in obj]
    return obj


def _same_csv(a: Path, b: Path) -> str | None:
    da, db = pd.read_csv(a), pd.read_csv(b)
    if list(da.columns) != list(db.columns):
        return f"columns differ: {list(da.columns)} vs {list(db.columns)}"
    keep = [c for c in da.columns if not TIMING.search(c)]
    da, db = da[keep], db[keep]
    if da.shape != db.shape:
        return f"shape {da.shape} vs {db.shape}"
    for c in keep:
        x, y = da[c].to_numpy(), db[c].to_numpy()
        same = [(u == v) or (isinstance(u, float) and isinstance(v, float) and math.isnan(u) and math.isnan(v))
                for u, v in zip(x, y)]
        if not all(same):
            i = same.index(False)
            return f"column {c} row {i}: {x[i]!r} vs {y[i]!r}"
    return None


def _markdown_without_timing(path: Path) -> list[str]:
    """A markdown table with the cells of its timing columns removed (other lines as they are)."""
    lines, drop = [], None
    for line in path.read_text().splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if drop is None:
                drop = {i for i, c in enumerate(cells) if TIMING.search(c.replace(" ", "_")) or WORDED_TIMING.search(c)}
            line = "|".join(c for i, c in enumerate(cells) if i not in drop)
        else:
            drop = None
        lines.append(line)
    return lines


def compare_outputs(local: Path, cluster: Path) -> tuple[int, list[str]]:
    """(files compared, differences): npz byte for byte, csv/json/md apart from timing and timestamps."""
    a, b = _outputs(local), _outputs(cluster)
    problems = [f"only in the local run: {p}" for p in sorted(a.keys() - b.keys())]
    problems += [f"only in the cluster run: {p}" for p in sorted(b.keys() - a.keys())]
    for rel in sorted(a.keys() & b.keys()):
        pa, pb = a[rel], b[rel]
        if rel.endswith(".csv"):
            diff = _same_csv(pa, pb)
        elif rel.endswith(".json"):
            ja, jb = (_strip_timing(json.loads(p.read_text())) for p in (pa, pb))
            if rel.removesuffix(".json") in a:  # a sidecar: its checksum follows its file, compared on its own
                ja, jb = ({k: v for k, v in j.items() if k not in ("sha256", "size_bytes")} for j in (ja, jb))
            diff = None if ja == jb else "json differs beyond timing keys"
        elif rel.endswith(".md"):
            diff = None if _markdown_without_timing(pa) == _markdown_without_timing(pb) else "markdown differs"
        else:  # .npz and anything else: bytes
            diff = None if pa.read_bytes() == pb.read_bytes() else "bytes differ"
        if diff:
            problems.append(f"{rel}: {diff}")
    return len(a.keys() & b.keys()), problems


def _fail(msg: str) -> None:
    """Fail with one line: the script's "FAILED: why" line, else the last line it printed."""
    lines = msg.strip().splitlines() or ["no output"]
    pytest.fail(next((ln for ln in lines if "FAILED:" in ln), lines[-1]), pytrace=False)


@pytest.fixture(scope="module")
def slurm_env(request):
    """A running single-node SLURM (environment for its clients); its daemons stopped afterwards."""
    global _capture
    _capture = request.config.pluginmanager.getplugin("capturemanager")
    inst = subprocess.run(["bash", str(SCRIPT), "install"], capture_output=True, text=True, timeout=900)
    for line in inst.stderr.splitlines():
        _log(line)
    if inst.returncode:
        _fail(inst.stderr)
    state = Path(tempfile.mkdtemp(prefix="attncert-slurm.", dir="/tmp"))
    started = False
    try:
        start = subprocess.run(["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True,
                               timeout=400)
        for line in start.stderr.splitlines():
            _log(line)
        if start.returncode:
            _fail(start.stderr)
        pids = {n: int((state / f"{n}.pid").read_text()) for n in ("munged", "slurmctld", "slurmd")}
        started = True
        yield dict(os.environ, SLURM_CONF=str(state / "slurm.conf"), SBATCH_PARTITION=PARTITION,
                   HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO / "src"))
    finally:
        stop = subprocess.run(["bash", str(SCRIPT), "stop", str(state)], capture_output=True, text=True, timeout=120)
        for line in stop.stderr.splitlines():
            _log(line)
        if started:
            live = [f"{n} {p}" for n, p in pids.items() if _alive(p)]
            assert stop.returncode == 0 and not live, f"daemons left running: {live}; {stop.stderr[-500:]}"
        shutil.rmtree(state, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def test_profile_runs_reduced_dag_on_slurm_like_a_local_run(slurm_env, tmp_path, tiny_gpt2_dir):
    local, cluster = tmp_path / "local", tmp_path / "cluster"
    cfg_local, cfg_cluster = (reduced_config(REPO, d, tiny_gpt2_dir) for d in (local, cluster))

    rc, out, secs = _snakemake(local, cfg_local, "--cores", "2", env=slurm_env, timeout=300)
    assert rc == 0, out[-3000:]
    _log(f"local run: {secs:.0f} s")

    # the profile's own settings, but the first status check after 1 s and one round every 2 s: on a one-node test
    # cluster the jobs take seconds, and the profile's back-off (10 s, then 10 s more per round) would be the run
    rc, out, secs = _snakemake(cluster, cfg_cluster, "--profile", str(PROFILE), "--slurm-status-command", "squeue",
                               "--slurm-keep-successful-logs", *FAST_STATUS_CHECKS, env=slurm_env, timeout=300)
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+)", out)
    assert rc == 0, out[-4000:]
    local_jobs = sorted(set(re.findall(r"^localrule (\w+):", out, re.M)))
    _log(f"cluster run: {secs:.0f} s, {len(submitted)} sbatch submissions (jobids {', '.join(submitted)}); "
         f"rules run on the submitting host: {', '.join(local_jobs)}")
    assert submitted, "no job went through sbatch"
    # tables ran on the submitting host; each cluster job asked for its rule's threads (extract: 1, one job per layer)
    assert {"certify_table", "baselines_table", "minip_table", "minip_collect"} <= set(local_jobs), local_jobs
    queue = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i %C %k"], env=slurm_env, capture_output=True,
                           text=True, timeout=60).stdout.split("\n")
    cpus = {k: int(c) for i, c, k in (ln.split(None, 2) for ln in queue if ln.strip()) if i in submitted}
    _log("cluster jobs (CPUs): " + ", ".join(f"{k} ({c})" for k, c in sorted(cpus.items())))
    assert [c for k, c in cpus.items() if k.startswith("rule_extract")] == [1], cpus
    # a layer's certification and baselines: one cluster job of 1 CPU (group layer_{model}_{layer})
    assert [c for k, c in cpus.items() if k.startswith("rule_layer_tiny-gpt2_0")] == [1], cpus
    assert not any(k.startswith(("rule_certify_layer", "rule_baselines_layer")) for k in cpus), cpus
    # the cluster jobs ran on SLURM: each submission left its SLURM log
    assert len(list((cluster / ".snakemake" / "slurm_logs").rglob("*.log"))) >= len(submitted)

    n, problems = compare_outputs(local, cluster)
    _log(f"outputs compared: {n} files, {len(problems)} differences")
    assert not problems, "\n".join(problems)
    assert n >= 20 and any(p.endswith(".npz") for p in _outputs(cluster))
