"""Min-IP training runs of a git revision (`--before`) and of the working tree, side by side: records compared
field by field, wall and CPU seconds per run.

    python -m bench.minip_train_side_by_side --before 1362eed --rounds 4

Each run (`--jobs`, SETTING:MODEL:SEED, with the parameters `minip.sweep.run_params` gives for
workflow/config/default.yaml, as the `minip_train` rule) is done in a fresh process with one BLAS/OpenMP thread,
once per tree and round; the two trees alternate which goes first, so both see the same load. The revision is
checked out into a temporary git worktree, removed at the end. Records: every field but `seconds` must be equal
(floats compared by their repr, i.e. bit for bit). Times: the run itself (`run_scaling` / `run_witness`), not the
process start-up and imports (reported apart). The machine may be loaded: compare the two trees, not the seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common

common.single_threaded_blas()

REPO = common.REPO
JOBS = ["m16-n3:r4:0", "m16-n3:r4:1", "witness:r8:0", "witness:r8:1", "m12-n2:r1:0", "m12-n2:r1:1",
        "m8-n3:dense:0"]
QUICK = {"rounds": 1, "jobs": ["m8-n2:r1:0", "m8-n3:r2:0"]}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="1362eed", help="git revision to compare with (default: before the "
                    "Min-IP step changes)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--jobs", nargs="+", default=JOBS, help="SETTING:MODEL:SEED")
    ap.add_argument("--config", default=str(REPO / "workflow/config/default.yaml"))
    ap.add_argument("--child", nargs=2, metavar=("SRC", "JOB"), help=argparse.SUPPRESS)
    return ap


def child(src: str, job: str, config: str) -> None:
    """One run in this process, with the attncert of `src` (on PYTHONPATH): prints a JSON line."""
    t0 = time.perf_counter()
    import attncert
    import yaml
    from attncert.minip.sweep import parse_model, parse_setting, run_params
    from attncert.minip.training import TrainConfig, run_scaling, run_witness
    from attncert.minip.witness import witness_family
    imports = time.perf_counter() - t0
    if Path(attncert.__file__).resolve().parents[1] != Path(src).resolve():
        sys.exit("minip_train_side_by_side: attncert is not imported from the tree asked for")
    setting, model, seed = job.split(":")
    run = run_params(yaml.safe_load(open(config))["minip"], setting, "cpu")
    kind, rank = parse_model(model)
    what, bits, length = parse_setting(setting)
    train = TrainConfig(**run["train"])
    t0, c0 = time.perf_counter(), time.process_time()
    if what == "witness":
        w = run["witness"]
        rec = run_witness(family=witness_family(w["bits"], w["queries"], w["ladder_step"]), kind=kind, rank=rank,
                          seed=int(seed), train=train, device="cpu")
    else:
        rec = run_scaling(bits=bits, length=length, kind=kind, rank=rank, seed=int(seed), train=train, device="cpu",
                          **run["scaling"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    record = {k: repr(v) if isinstance(v, float) else v for k, v in rec.items() if k != "seconds"}
    print(json.dumps({"imports": imports, "wall": wall, "cpu": cpu, "record": record}))


def _spread(xs: list[float]) -> str:
    return f"min {min(xs):.2f} median {statistics.median(xs):.2f}"


def main(args) -> dict:
    trees = {}
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(before), args.before],
                       check=True)
        try:
            trees = {"before": before / "src", "after": REPO / "src"}
            runs = {t: {j: [] for j in args.jobs} for t in trees}
            k = 0
            for _ in range(args.rounds):
                for job in args.jobs:
                    order = list(trees) if k % 2 == 0 else list(trees)[::-1]
                    k += 1
                    for t in order:
                        env = {**os.environ, "PYTHONPATH": str(trees[t])}
                        out = subprocess.run([sys.executable, "-m", "bench.minip_train_side_by_side", "--child",
                                              str(trees[t]), job, "--config", args.config], cwd=REPO, env=env,
                                             capture_output=True, text=True)
                        if out.returncode:
                            sys.exit(f"minip_train_side_by_side: {t} {job} failed:\n{out.stderr[-2000:]}")
                        runs[t][job].append(json.loads(out.stdout.strip().splitlines()[-1]))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)], check=False)
    before_rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.before], capture_output=True,
                                text=True).stdout.strip()
    print(f"before: {args.before} ({before_rev}); after: the working tree; {args.rounds} round(s), one process per "
          f"run, trees alternating; seconds of the run itself")
    result = {"before": args.before, "rounds": args.rounds, "jobs": {}}
    all_equal = True
    for job in args.jobs:
        recs = {t: [r["record"] for r in runs[t][job]] for t in trees}
        repeatable = all(r == recs[t][0] for t in trees for r in recs[t])
        differing = sorted(k for k in set(recs["before"][0]) | set(recs["after"][0])
                           if recs["before"][0].get(k) != recs["after"][0].get(k))
        all_equal &= repeatable and not differing
        row = {"identical": not differing, "repeatable": repeatable, "differing_fields": differing}
        for what in ("wall", "cpu"):
            b = [r[what] for r in runs["before"][job]]
            a = [r[what] for r in runs["after"][job]]
            row[what] = {"before": b, "after": a, "ratio_median": statistics.median(b) / statistics.median(a),
                         "ratio_min": min(b) / min(a)}
        result["jobs"][job] = row
        print(f"{job:15s} records {'identical' if not differing else 'DIFFER: ' + ', '.join(differing)}"
              f"{'' if repeatable else ' (NOT repeatable)'}")
        for what in ("cpu", "wall"):
            r = row[what]
            print(f"  {what:4s} s  before {_spread(r['before'])} | after {_spread(r['after'])} | "
                  f"before/after x{r['ratio_median']:.2f} (medians) x{r['ratio_min']:.2f} (minima)")
    imports = {t: [r["imports"] for j in args.jobs for r in runs[t][j]] for t in trees}
    print(f"imports (torch, attncert.minip) s: before {_spread(imports['before'])} | after {_spread(imports['after'])}")
    print("all records identical" if all_equal else "RECORDS DIFFER")
    result["all_identical"] = all_equal
    return result


if __name__ == "__main__":
    parsed = build_parser().parse_known_args()[0]
    if parsed.child:
        child(*parsed.child, parsed.config)
    else:
        common.run("minip_train_side_by_side", main, common.parse(build_parser(), QUICK))
