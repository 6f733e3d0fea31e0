"""The Snakemake DAG end to end on a tiny random GPT-2: extraction -> certification -> baselines.

Also: the default DAG lists every stage in a dry run, `snakemake --lint` is clean, and an
interrupted run, rerun, completes without redoing finished jobs or leaving partial outputs.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from attncert.baselines.comparison import PAPER_ALPHA_METHOD
from attncert.baselines.linear_bound_baselines import METHODS
from attncert.certify.certificate_store import CertificateFile
from conftest import REPO
from tiny_run import SNAKEMAKE, TARGETS, copy_tiny_run, run_snakemake, tiny_workdir


@pytest.mark.slow
def test_default_dag_dry_run_lists_every_stage():
    res = subprocess.run([SNAKEMAKE, "-n", "--forceall", "--cores", "all"], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    for rule in ("extract", "certify_layer", "baselines_layer", "certify_table", "baselines_table", "block_transition",
                 "block_table", "minip_train", "minip_measured", "paper_vs_reproduced"):
        assert rule in res.stdout, rule


@pytest.mark.slow
def test_lint_is_clean():
    res = subprocess.run([SNAKEMAKE, "--lint"], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=300)
    assert res.returncode == 0 and "Congratulations" in res.stdout + res.stderr, (res.stdout + res.stderr)[-3000:]


@pytest.mark.slow
def test_tiny_gpt2_certify_and_baselines(tmp_path, tiny_run):
    """The shared tiny run (built by `tiny_run.build_tiny_run` through this DAG): every unit certified soundly,
    every baseline unit kept, the measured values and figures written, and a rerun has nothing to do."""
    wd, cfg = copy_tiny_run(tiny_run, tmp_path / "run")
    cert = pd.concat([pd.read_csv(wd / f"data/certify/tiny-gpt2/layer{L}.csv") for L in (0, 1)])
    assert len(cert) == 2 * 1 * 2 * 1 * 3 * 2  # layers x heads x prompts x qp x radii x modes
    assert (cert["status"] != "UNSOUND").all()
    fixed = cert[cert["mode"] == "fixed"]
    assert (fixed["exact_hi"] >= fixed["best_feasible"] - 1e-9).all()
    assert (cert["first_order"] >= cert["best_feasible"] - 1e-9).all()
    base = pd.read_csv(wd / "data/baselines/tiny-gpt2/layer0.csv")
    assert set(base["method"]) == set(METHODS)
    assert (base["status"] == "ok").all(), base.loc[base["status"] != "ok", "status"].tolist()  # no lost units
    measured = json.loads((wd / "figures/tables/tiny-gpt2/baselines_measured.json").read_text())["values"]
    assert measured["baseline_units_lost"] == 0 and measured["alpha_crown_variant"] == PAPER_ALPHA_METHOD
    assert set(measured["crown_tighter_than_first_order_smallest_r"]) == {"fixed", "varying"}
    assert (wd / "figures/certify/tiny-gpt2/relative_gap_vs_radius.png").stat().st_size > 10_000
    assert (wd / "data/extract/tiny-gpt2/layer0.npz.json").is_file()
    # rerunning does nothing: every output is complete and up to date
    again = run_snakemake(wd, cfg, *TARGETS, extra=("-n",))
    assert "Nothing to be done" in again.stdout + again.stderr, (again.stdout + again.stderr)[-3000:]


@pytest.mark.slow
def test_interrupted_run_resumes(tmp_path, tiny_gpt2_dir):
    """A hard kill while a job runs, then a rerun: the killed job is redone, a finished one is not.

    The proof that a job was interrupted is its log: every job opens its log when it starts and writes
    "layer L: ... units" as its last line after the output is in place. The kill lands only when one table
    is finished and another layer's job has started (log present, no table); after the kill that job's
    log has no closing line and its table does not exist, and after the rerun both do."""
    wd, cfg = tiny_workdir(tmp_path, tiny_gpt2_dir)
    layers = (0, 1)
    targets = [f"data/certify/tiny-gpt2/layer{L}.csv" for L in layers]
    tables = {L: wd / f"data/certify/tiny-gpt2/layer{L}.csv" for L in layers}
    logs = {L: wd / f"data/logs/tiny-gpt2/certify/layer{L}.log" for L in layers}
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    cmd = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(wd), "--configfile", str(cfg),
           "--cores", "1", *targets]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)

    def in_flight():  # one core: at most one certification job runs at a time
        return [L for L in layers if logs[L].exists() and not tables[L].exists()]

    give_up = time.time() + 600
    while time.time() < give_up and proc.poll() is None:
        if any(t.exists() for t in tables.values()) and in_flight():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before a job could be interrupted"
    os.killpg(proc.pid, signal.SIGKILL)  # a hard kill mid-run (no clean-up by Snakemake)
    proc.wait()
    killed = in_flight()
    finished = [L for L in layers if tables[L].exists()]
    assert len(killed) == 1 and finished, (killed, finished)
    killed = killed[0]
    assert not re.search(rf"layer {killed}: \d+ units", logs[killed].read_text()), "the job had finished"
    done_before = {L: tables[L].stat().st_mtime for L in finished}
    # whatever exists now must be complete: a csv that parses with every unit, never a partial file
    for f in (wd / "data/certify/tiny-gpt2").glob("layer*.csv"):  # hidden .tmp files of a killed job are not outputs
        assert len(pd.read_csv(f)) == 2 * 3 * 2
    # a killed Snakemake leaves its lock behind; `--unlock` (docs/scaling_out.md) releases it
    assert run_snakemake(wd, cfg, *targets, extra=("--unlock",)).returncode == 0
    res = run_snakemake(wd, cfg, *targets, extra=("--rerun-incomplete",))
    assert res.returncode == 0, res.stderr[-3000:]
    assert {L: tables[L].stat().st_mtime for L in finished} == done_before, "a finished job was redone"
    assert tables[killed].exists() and re.search(rf"layer {killed}: \d+ units", logs[killed].read_text()), \
        "the interrupted job was not redone"
    for L in layers:
        assert len(pd.read_csv(tables[L])) == 2 * 3 * 2


def _planned_rules(dry_run_output: str) -> set[str]:
    """Rule names of the jobs a dry run would run ('rule NAME:' headers)."""
    return set(re.findall(r"^(?:local)?rule (\w+):", dry_run_output, re.M))


def _copy_repo(dst: Path) -> Path:
    """A throwaway copy of the code (Snakefile, workflow, src, data): the test edits a module of the copy."""
    shutil.copy(REPO / "Snakefile", dst / "Snakefile")
    shutil.copy(REPO / "environment.yml", dst / "environment.yml")
    shutil.copytree(REPO / "data", dst / "data", ignore=shutil.ignore_patterns("extract", "certify", "baselines",
                                                                               "block", "minip", "logs"))
    shutil.copytree(REPO / "workflow", dst / "workflow")
    shutil.copytree(REPO / "src", dst / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dst


@pytest.mark.slow
def test_editing_a_stage_reruns_that_stage_and_its_dependents_only(tmp_path, tiny_run):
    """No stale results: a stage's jobs carry the hash of their source closure as a param, so editing a
    certification module reruns certification and what depends on it, never a Min-IP job; changing a
    Min-IP config value reruns only Min-IP jobs. Runs the shared tiny run's DAG from a copy of the code."""
    (tmp_path / "code_copy").mkdir()
    code = _copy_repo(tmp_path / "code_copy")
    wd, cfg = copy_tiny_run(tiny_run, tmp_path / "run")
    targets = ["figures/tables/tiny-gpt2/baselines.md", "data/minip/default/constructions.csv"]
    conf = yaml.safe_load(cfg.read_text())

    def plan(config=cfg):
        res = run_snakemake(wd, config, *targets, extra=("-n",), code=code)
        assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
        return res.stdout + res.stderr

    assert "Nothing to be done" in (out := plan()), out[-3000:]  # the same code, elsewhere: up to date
    # a Min-IP config value: only the Min-IP job that reads it
    conf["minip"]["constructions"]["max_bits"] = 3
    other = cfg.with_name("tiny_minip.yaml")
    other.write_text(yaml.safe_dump(conf))
    assert _planned_rules(out := plan(other)) == {"minip_constructions"}, out[-3000:]
    # edit one module of the certification stage (a comment changes the source, not the behaviour)
    module = code / "src" / "attncert" / "certify" / "exact_worst_case.py"
    module.write_text(module.read_text() + "\n# edited by the staleness test\n")
    listed = _planned_rules(plan())
    assert {"certify_layer", "baselines_layer", "baselines_table"} <= listed, listed
    assert not {r for r in listed if r.startswith("minip") or r == "extract"}, listed


@pytest.mark.slow
def test_long_context_target_on_tiny_gpt2(tmp_path, tiny_gpt2_dir):
    """The long-context experiment end to end: 60 attended keys (the separable path above 48), causal query
    'last', fixed and varying query, no fallback and no violation, every certified number's certificate stored; its
    measured values reach the claims' keys."""
    lc = {"passage": "data/long_context_passage.txt", "layer": 1, "heads": [1], "lengths": [8, 60],
          "query_position": "last", "radii": [0.003, 0.03], "norms": ["linf", "l2"], "modes": ["fixed", "varying"],
          "tight": True}
    wd, cfg = tiny_workdir(tmp_path, tiny_gpt2_dir, long_context=lc)
    shutil.copy(REPO / "data" / "long_context_passage.txt", wd / "data" / "long_context_passage.txt")
    res = run_snakemake(wd, cfg, "figures/tables/tiny-gpt2/long_context.md")
    assert res.returncode == 0, res.stderr[-4000:]
    units = pd.read_csv(wd / "data/long_context/tiny-gpt2/units.csv")
    assert (
        len(units) == 2 * 2 * 2 * 2 and set(units["n_tokens"]) == {8, 60} and set(units["mode"]) == {"fixed", "varying"}
    )
    assert (units["status"] == "ok").all(), units[["status", "error"]].to_string()
    fixed = units[units["mode"] == "fixed"]
    assert (fixed["second_order"] >= fixed["exact_hi"] - 1e-9 * (1 + fixed["value_spread"].abs())).all()
    assert (units["second_order"] >= units["best_feasible"] - 1e-9 * (1 + units["best_feasible"].abs())).all()
    assert (fixed["second_order_tight"] <= fixed["second_order"] + 1e-9).all()  # fixed query: never above (§4.1)
    with CertificateFile(wd / "data/long_context/tiny-gpt2/units_certificates.npz") as f:
        assert f.rows == list(range(len(units)))
    measured = json.loads((wd / "figures/tables/tiny-gpt2/long_context_measured.json").read_text())["values"]
    assert measured["long_context_largest_n"] == 60 and measured["long_context_violations"] == 0
    assert measured["long_context_varying_largest_n"] == 60 and measured["long_context_varying_violations"] == 0
    assert (wd / "figures/long_context/tiny-gpt2/gap_and_time_vs_keys.png").stat().st_size > 10_000
    # one job per (length group, head): 8 + 60 keys exceed the longest length, so 8 and 60 are two jobs; a damaged
    # part stops the merge with one line naming the command that fixes it
    part = wd / "data/long_context/tiny-gpt2/parts/lengths8_head1_certificates.npz"  # the cheaper part to redo
    assert sorted(p.name for p in part.parent.glob("*.csv")) == ["lengths60_head1.csv", "lengths8_head1.csv"]
    part.write_bytes(part.read_bytes()[:-100])
    failed = run_snakemake(wd, cfg, "data/long_context/tiny-gpt2/units.csv")
    fix = ("snakemake --cores all data/long_context/tiny-gpt2/parts/lengths8_head1_certificates.npz "
           "--forcerun long_context_certify")
    out = failed.stdout + failed.stderr
    lines = {line for line in out.splitlines() if line.startswith("attncert:")}
    assert failed.returncode != 0 and len(lines) == 1 and lines.pop().endswith(fix) and "Traceback" not in out, \
        out[-3000:]
    assert run_snakemake(wd, cfg, *fix.split()[3:]).returncode == 0
    again = run_snakemake(wd, cfg, "data/long_context/tiny-gpt2/units.csv")
    assert again.returncode == 0, again.stderr[-3000:]
    timing = [c for c in units.columns if c.startswith("t_")]
    pd.testing.assert_frame_equal(pd.read_csv(wd / "data/long_context/tiny-gpt2/units.csv").drop(columns=timing),
                                  units.drop(columns=timing))


def _job_counts(dry_run_output: str) -> dict[str, int]:
    """{rule: jobs} of a dry run's 'Job stats' table."""
    stats = dry_run_output.split("Job stats:")[-1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M) if m.group(1) != "total"}


@pytest.mark.slow
def test_a_damaged_layer_is_regenerated_alone_and_leaves_no_sidecar_behind(tmp_path, tiny_run):
    """A truncated extracted layer: the job reading it stops with one line; Snakemake removes that job's outputs
    and none of their sidecars stays behind; the command the line suggests re-extracts that layer alone (one job
    per layer), and the plan that follows is that layer's chain, not the other layer's."""
    wd, cfg = copy_tiny_run(tiny_run, tmp_path / "run")
    targets = [f"data/certify/tiny-gpt2/layer{L}.csv" for L in (0, 1)]
    extracted = {L: wd / f"data/extract/tiny-gpt2/layer{L}.npz" for L in (0, 1)}
    others = {1: extracted[1].stat().st_mtime_ns}
    extracted[0].write_bytes(extracted[0].read_bytes()[:200])
    time.sleep(1)  # a newer mtime than the certification tables
    failed = run_snakemake(wd, cfg, *targets, extra=("--keep-going",))
    out = failed.stdout + failed.stderr
    fix = "snakemake --cores all data/extract/tiny-gpt2/layer0.npz --forcerun extract"
    assert failed.returncode != 0 and "layer0.npz is corrupted (200 bytes" in out and fix in out, out[-3000:]
    assert not (wd / "data/certify/tiny-gpt2/layer0.csv").exists()
    orphans = [p for p in (wd / "data").rglob("*.*.json") if not p.with_name(p.name[:-5]).exists()]
    assert orphans == [], orphans
    repaired = run_snakemake(wd, cfg, *fix.split()[3:])  # the target, then --forcerun extract
    assert repaired.returncode == 0 and _job_counts(repaired.stdout + repaired.stderr) == {"extract": 1}, \
        (repaired.stdout + repaired.stderr)[-3000:]
    assert {1: extracted[1].stat().st_mtime_ns} == others
    plan = run_snakemake(wd, cfg, *targets, extra=("-n",))
    assert _job_counts(plan.stdout + plan.stderr) == {"certify_layer": 1}, plan.stdout[-3000:]
    planned = re.findall(r"^\s+output: (.+)$", plan.stdout, re.M)
    assert len(planned) == 1 and "data/certify/tiny-gpt2/layer0.csv" in planned[0], planned
