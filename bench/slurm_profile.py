"""The SLURM profile against an older revision's, on a real single-node SLURM: the reduced DAG (the
cluster test's) run through `workflow/profiles/slurm` of this tree and of `--ref`, in pairs, each run
in a fresh directory. Per run: sbatch submissions, rules run on the submitting host, wall seconds;
per pair: the ratio of the two walls.

    python -m bench.slurm_profile [--ref 342059e] [--pairs 3]     # needs root (apt-get) or SLURM installed

The reduced DAG: a tiny random GPT-2 (`model.tiny_model`), extraction, one certification layer, one
baselines layer, the Min-IP runs of a one-rank sweep, and the certification, baselines and Min-IP
tables (`targets`, `reduced_config`). Each revision runs its own Snakefile, rules, profile and
package (PYTHONPATH its src/) on the current environment. `--slurm-status-command squeue` is given to
both: the single-node cluster has no accounting database, and without it no revision's run ends.
The order inside a pair alternates (before first, then after first), so a drift of the machine's load
does not favour one side. The cluster (`workflow/cluster/slurm_single_node.sh`) is started here and
stopped at the end, also on failure.

Cost: a run takes one to five minutes; the full benchmark (3 pairs) 15-25 minutes.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench import common

REPO = common.REPO
SCRIPT = REPO / "workflow" / "cluster" / "slurm_single_node.sh"
PARTITION = "attncert"  # the single-node cluster's partition (not a default one: the profile must pass it on)
BEFORE = "342059e"  # the profile and rules before the cluster work: no localrules, no packing, cpus_per_task 1
QUICK = {"pairs": 1}


def targets(grid: str | None) -> list[str]:
    """Extraction, one certification layer, one baselines layer, the Min-IP runs, and the tables on them. The Min-IP
    tables sit under their grid's folder (`minip.name`); a revision whose config names no grid writes them at the
    top of figures/tables."""
    minip = f"figures/tables/minip/{grid}/minip_" if grid else "figures/tables/minip_"
    return ["figures/tables/tiny-gpt2/certification.csv", "figures/tables/tiny-gpt2/baselines.csv",
            f"{minip}witness.csv", f"{minip}transition.csv"]


#: this tree's targets (its default config's grid)
TARGETS = targets(yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())["minip"]["name"])


def reduced_config(tree: Path, workdir: Path, model_dir: Path) -> Path:
    """Write `workdir/reduced.yaml` (from `tree`'s default config) and the inputs it reads; returns its path."""
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    for f in ("prompts.txt", "paper_claims.yaml"):
        shutil.copy(tree / "data" / f, workdir / "data" / f)
    cfg = yaml.safe_load((tree / "workflow" / "config" / "default.yaml").read_text())
    cfg["model"] = {"name": "tiny-gpt2", "family": "gpt2", "source": str(model_dir)}
    cfg.update(n_prompts=1, max_tokens=6, layers=[0], heads=[1])
    cfg["certify"].update(prompts=[0], query_positions=[3], radii=[0.001, 0.01], ascent_restarts=2, ascent_steps=20)
    cfg["baselines"].update(query_positions=[3], radii=[0.001], methods=["ibp", "crown"])
    m = cfg["minip"]
    m["seeds"] = [0]
    m["witness"].update(bits=8, queries=2, ranks=[1], steps=40)
    m["scaling"].update(sizes=[4], lengths=[{"length": 2, "ranks": [1], "steps": 40}], eval_sequences=64, batch=16)
    path = workdir / "reduced.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def profile_run(tree: Path, workdir: Path, model_dir: Path, env: dict, timeout: int = 900) -> dict:
    """The reduced DAG through `tree`'s SLURM profile: wall seconds, sbatch submissions, host-run rules."""
    cfg = reduced_config(tree, workdir, model_dir)
    grid = yaml.safe_load(cfg.read_text())["minip"].get("name")
    cmd = [str(Path(sys.executable).with_name("snakemake")), "--snakefile", str(tree / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(cfg), "--profile", str(tree / "workflow/profiles/slurm"),
           "--slurm-status-command", "squeue", *targets(grid)]
    t0 = time.time()
    proc = subprocess.run(cmd, env=dict(env, PYTHONPATH=str(tree / "src")), capture_output=True, text=True,
                          timeout=timeout)
    wall = time.time() - t0
    out = proc.stdout + proc.stderr
    if proc.returncode:
        raise SystemExit(f"slurm_profile: the run of {tree} failed (exit {proc.returncode}):\n{out[-2000:]}")
    return {"wall_s": round(wall, 1),
            "submissions": len(re.findall(r"has been submitted with SLURM jobid", out)),
            "host_jobs": len(re.findall(r"^localrule \w+:", out, re.M))}


def _cluster(action: str, state: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT), action, str(state)], capture_output=True, text=True, timeout=600)
    if proc.returncode:
        lines = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
        raise SystemExit(next((ln for ln in lines if "FAILED:" in ln), lines[-1]))


def main(args) -> dict:
    common.single_threaded_blas()
    from attncert.model.tiny_model import save_tiny_model

    base = Path(tempfile.mkdtemp(prefix="attncert-slurm-bench."))
    state, ref_tree = base / "slurm", base / "ref"
    _cluster("install", state)
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(ref_tree), args.ref], cwd=REPO, check=True)
    runs = []
    try:
        _cluster("start", state)
        env = dict(os.environ, SLURM_CONF=str(state / "slurm.conf"), SBATCH_PARTITION=PARTITION,
                   HF_HUB_OFFLINE="1")
        model_dir = save_tiny_model(base / "tiny-gpt2", "gpt2")
        sides = {"before": ref_tree, "after": REPO}
        for pair in range(1, args.pairs + 1):
            order = ("before", "after") if pair % 2 else ("after", "before")
            for side in order:
                r = profile_run(sides[side], base / f"run{pair}-{side}", model_dir, env)
                runs.append({"pair": pair, "profile": side, **r})
                print(f"[bench] pair {pair} {side}: {r}", file=sys.stderr, flush=True)
    finally:
        _cluster("stop", state)
        subprocess.run(["git", "worktree", "remove", "--force", str(ref_tree)], cwd=REPO, check=False)
        shutil.rmtree(base, ignore_errors=True)

    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    print(f"Reduced DAG through workflow/profiles/slurm on a single-node SLURM (2 CPUs): before = {args.ref}, "
          f"after = this tree ({head}).\n")
    print("| pair | profile | sbatch submissions | rules run on the submitting host | wall (s) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for r in runs:
        print(f"| {r['pair']} | {r['profile']} | {r['submissions']} | {r['host_jobs']} | {r['wall_s']:.1f} |")
    ratios = []
    for pair in range(1, args.pairs + 1):
        w = {r["profile"]: r["wall_s"] for r in runs if r["pair"] == pair}
        ratios.append(w["before"] / w["after"])
    print("\nwall before / after, per pair: " + ", ".join(f"{x:.2f}x" for x in ratios)
          + f"; median {sorted(ratios)[len(ratios) // 2]:.2f}x")
    return {"ref": args.ref, "head": head, "runs": runs, "ratios": ratios}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default=BEFORE, help=f"the revision to compare with (default {BEFORE})")
    ap.add_argument("--pairs", type=int, default=3, help="before/after pairs (default 3)")
    return ap


if __name__ == "__main__":
    common.run("slurm_profile", main, common.parse(build_parser(), QUICK))
