"""Before and after, side by side in one process, on the same units of a run: the two costs of the per-layer jobs
that this code changed, and whether their results stayed the same to the last bit.

    ascent     the varying-query warm-started ascents of certify_layer: `best_feasible_ascent` of the code at
               --before (read from git) on each unit alone, against today's `best_feasible_ascents` on all radii
               of a (head, prompt) at once; compared: value, point, every start's best value
    baselines  baselines_layer's seven methods on the units of a head (both modes, the four radii): the bound
               network with the library's `BoundParallel` and alpha-CROWN's steps by `torch.optim.Adam` (before)
               against `BoundSummedParallel` and `AdamSteps` (torch.optim.Adam's first-use import of torch._dynamo
               is paid before the timing: it is a cost per process, not per unit); compared: every upper bound

    jobs       the two jobs whole, each in its own process as the workflow runs it (the job functions of
               bench.profile_layer_jobs, no profiler, one BLAS thread), the certify_layer and the baselines_layer
               job of a layer side by side as on the pipeline's 2 cores: the code at --before (default JOBS_BEFORE,
               exported with `git archive`) against the working tree's, on each of --layers; compared: every
               column of both tables except the timing columns, and the certificate file byte for byte

Before and after alternate per group (jobs: per layer, the version that runs first alternating), so that both see
the same load; the report gives wall and CPU seconds (CPU seconds of this process, jobs: of the job's process: less
disturbed by other work on a shared machine) and their ratios.

    python -m bench.layer_jobs_side_by_side --part ascent --data /path/to/run/data --layer 0 --heads 0 5 9
    python -m bench.layer_jobs_side_by_side --part jobs --data /path/to/run/data --layers 0 3
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from bench import common

common.single_threaded_blas()

BEFORE = "625fadc"  # the code before the batched ascent and the summed parallel branches
JOBS_BEFORE = "1362eed"  # the code before the -after2 changes (network build, parameter setting, warm starts, npy)
JOBS = ("certify_layer", "baselines_layer")
TIMING = ("seconds", "seconds_certificate_beside")  # timing columns of the tables (and every t_* column)
QUICK = {"heads": [0]}
RADII = {"ascent": [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02], "baselines": [0.001, 0.002, 0.005, 0.01]}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("ascent", "baselines", "jobs"), required=True)
    ap.add_argument("--data", type=Path, default=Path("data"), help="a finished run's data/ directory (read only)")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--layer", type=int, default=0)
    ap.add_argument("--heads", type=int, nargs="+", default=[0, 5, 9])
    ap.add_argument("--layers", type=int, nargs="+", default=[0, 3], help="layers of the jobs part")
    ap.add_argument("--before", default=None,
                    help=f"git revision of the code before (default: {BEFORE}; jobs part: {JOBS_BEFORE})")
    ap.add_argument("--child", nargs=4, metavar=("JOB", "DATA", "LAYER", "OUT"), help=argparse.SUPPRESS)
    return ap


def _module_at(rev: str, path: str, name: str):
    """The module at `path` as it was at git revision `rev`, imported under `name`."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=common.REPO, check=True, capture_output=True,
                            text=True).stdout
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def ascent_part(args, arrays, spec) -> tuple[dict, bool]:
    import numpy as np

    from attncert.certify.best_feasible_ascent import best_feasible_ascents
    from attncert.certify.exact_worst_case import exact_worst_case
    from attncert.certify.run import _ascent_kw
    from attncert.head.units import Unit, head_problem

    before = _module_at(args.before, "src/attncert/certify/best_feasible_ascent.py", "ascent_before")
    kw = _ascent_kw(6, 100, 0, "cpu")
    totals, same = {"before": [0.0, 0.0], "after": [0.0, 0.0]}, True
    for h in args.heads:
        for prompt in (0, 1):
            problems = [head_problem(arrays, spec, [4], Unit(args.layer, h, prompt, 4, r, "linf", "varying"))
                        for r in RADII["ascent"]]
            warm = [(exact_worst_case(dataclasses.replace(p, mode="fixed"), sense="max").witness - p.Z0)[None]
                    for p in problems]
            old, w0, c0 = _timed(lambda: [before.best_feasible_ascent(p, starts=s, **kw)
                                          for p, s in zip(problems, warm)])
            new, w1, c1 = _timed(lambda: best_feasible_ascents(problems, starts=warm, **kw))
            for key, w, c in (("before", w0, c0), ("after", w1, c1)):
                totals[key][0] += w
                totals[key][1] += c
            for a, b in zip(old, new):
                same &= (a.value == b.value and np.array_equal(a.Z, b.Z)
                         and np.array_equal(a.start_values, b.start_values))
    return totals, same


def baselines_part(args, arrays, spec) -> tuple[dict, bool]:
    from bound_propagation import Parallel
    from bound_propagation.parallel import BoundParallel

    import torch

    import attncert.baselines.head_network as head_network
    import attncert.baselines.linear_bound_baselines as linear_bound_baselines
    from attncert.baselines.adam_steps import AdamSteps
    from attncert.baselines.linear_bound_baselines import METHODS, baseline_upper_bounds
    from attncert.baselines.registry import head_factory
    from attncert.head.units import Unit, head_problem

    def library_parallel():
        factory = head_factory()
        factory.register(Parallel, BoundParallel)
        return factory

    def torch_adam(params, lr, betas):
        return torch.optim.Adam(params, lr=lr, betas=betas)

    versions = {"before": (library_parallel, torch_adam), "after": (head_factory, AdamSteps)}
    torch_adam([torch.zeros(1, requires_grad=True)], 0.1, (0.5, 0.99))  # its one-time import, outside the timing

    totals, same = {"before": [0.0, 0.0], "after": [0.0, 0.0]}, True
    try:
        for h in args.heads:
            for mode in ("fixed", "varying"):
                problems = [head_problem(arrays, spec, [4], Unit(args.layer, h, 0, 4, r, "linf", mode))
                            for r in RADII["baselines"]]
                for method in METHODS:
                    uppers = {}
                    for key, (factory, adam) in versions.items():
                        head_network.head_factory, linear_bound_baselines.AdamSteps = factory, adam
                        res, w, c = _timed(lambda: baseline_upper_bounds(problems, method))
                        totals[key][0] += w
                        totals[key][1] += c
                        uppers[key] = [r.upper for r in res]
                    same &= uppers["before"] == uppers["after"]
    finally:
        head_network.head_factory, linear_bound_baselines.AdamSteps = head_factory, AdamSteps
    return totals, same


def _child(job: str, data: str, layer: str, out: str) -> None:
    """One job, run in this process (the jobs part's child): the `attncert` on the path is the version timed."""
    import torch

    from bench.profile_layer_jobs import baselines_layer_job, certify_layer_job, run_config

    torch.set_num_threads(1)
    cfg = run_config(Path(data), "all-MiniLM-L6-v2")
    Path(out).mkdir(parents=True, exist_ok=True)
    fn = certify_layer_job if job == "certify_layer" else baselines_layer_job
    fn(cfg, Path(data), "all-MiniLM-L6-v2", int(layer), Path(out))


def _start(src: Path, job: str, args, layer: int, out: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(common.REPO)]))
    cmd = [sys.executable, "-m", "bench.layer_jobs_side_by_side", "--part", "jobs", "--data", str(args.data),
           "--child", job, str(args.data), str(layer), str(out)]
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{job}.log", "wb") as log:  # the job's progress and warnings (a file: never blocks)
        return subprocess.Popen(cmd, cwd=common.REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)


def _finish(procs: dict) -> dict:
    """{job: (wall, CPU seconds)} of the started jobs ({job: (process, start time, log)}), each job's wall time
    up to its own end; RuntimeError with a failed job's log's end."""
    out, by_pid = {}, {proc.pid: job for job, (proc, _, _) in procs.items()}
    while by_pid:
        pid, status, usage = os.wait4(-1, 0)
        job = by_pid.pop(pid, None)
        if job is None:
            continue
        proc, started, log = procs[job]
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise RuntimeError(f"{job} failed ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}")
        out[job] = (wall, usage.ru_utime + usage.ru_stime)
    return out


def _same_outputs(a: Path, b: Path) -> list[str]:
    """The differences between two output directories of a job: tables (every non-timing column, as written) and
    other files (bytes)."""
    import pandas as pd

    out = []
    for fa in sorted(a.iterdir()):
        fb = b / fa.name
        if not fb.exists():
            out.append(f"{fa.name}: missing")
        elif fa.suffix == ".csv":
            ta, tb = (pd.read_csv(f, dtype=str, keep_default_na=False) for f in (fa, fb))
            if list(ta.columns) != list(tb.columns) or len(ta) != len(tb):
                out.append(f"{fa.name}: other columns or rows")
                continue
            cols = [c for c in ta.columns if not (c.startswith("t_") or c in TIMING)]
            out += [f"{fa.name}: column {c}, {int((ta[c] != tb[c]).sum())} rows" for c in cols
                    if not ta[c].equals(tb[c])]
        elif hashlib.sha256(fa.read_bytes()).digest() != hashlib.sha256(fb.read_bytes()).digest():
            out.append(f"{fa.name}: bytes differ")
    return out


def jobs_part(args) -> tuple[dict, bool, dict]:
    rev = args.before or JOBS_BEFORE
    totals = {f"{job}/{v}": [0.0, 0.0] for job in JOBS for v in ("before", "after")}
    per_layer, same = {}, True
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        export = tmp / "before"
        export.mkdir()
        archive = subprocess.run(["git", "archive", rev, "src"], cwd=common.REPO, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(export)], input=archive.stdout, check=True)
        sources = {"before": export / "src", "after": common.REPO / "src"}
        for k, layer in enumerate(args.layers):
            order = ("before", "after") if k % 2 == 0 else ("after", "before")
            for version in order:
                procs = {job: (_start(sources[version], job, args, layer, tmp / version / str(layer) / job),
                               time.perf_counter(), tmp / version / str(layer) / f"{job}.log") for job in JOBS}
                for job, (wall, cpu) in _finish(procs).items():
                    totals[f"{job}/{version}"][0] += wall
                    totals[f"{job}/{version}"][1] += cpu
                    per_layer[f"layer{layer}/{job}/{version}"] = {"wall": wall, "cpu": cpu}
            for job in JOBS:
                diff = _same_outputs(tmp / "before" / str(layer) / job, tmp / "after" / str(layer) / job)
                per_layer[f"layer{layer}/{job}/differences"] = diff
                same &= not diff
    return totals, same, per_layer


def main(args) -> dict:
    import torch

    if args.part == "jobs":
        totals, same, per_layer = jobs_part(args)
        print(f"jobs, layers {args.layers}, before = {args.before or JOBS_BEFORE} (shared machine: read the ratios)")
        for key, value in per_layer.items():
            if key.endswith("differences"):
                print(f"  {key}: {'; '.join(value) if value else 'none'}")
            else:
                print(f"  {key}: {value['wall']:.2f} s wall, {value['cpu']:.2f} s CPU")
        ratios = {}
        for job in JOBS:
            (wb, cb), (wa, ca) = totals[f"{job}/before"], totals[f"{job}/after"]
            ratios[job] = {"wall_ratio": wa / wb, "cpu_ratio": ca / cb}
            print(f"  {job}: before {wb:.2f} s wall, {cb:.2f} s CPU; after {wa:.2f} s wall, {ca:.2f} s CPU; "
                  f"after/before: wall {wa / wb:.3f}, CPU {ca / cb:.3f}")
        print(f"  outputs identical (tables without timing columns, certificate files byte for byte): {same}")
        return {"totals": totals, "per_layer": per_layer, "identical": same, "ratios": ratios}

    from attncert.head.units import load_specification, specification_vectors
    from attncert.model.extraction import load_layer

    torch.set_num_threads(1)
    arrays = load_layer(args.data / "extract" / args.model / f"layer{args.layer}.npz")
    args.before = args.before or BEFORE
    if args.part == "ascent":
        spec = specification_vectors(arrays, args.layer, [4], 0)
        totals, same = ascent_part(args, arrays, spec)
    else:
        spec, _ = load_specification(args.data / "certify" / args.model / f"layer{args.layer}_spec.npz")
        totals, same = baselines_part(args, arrays, spec)
    (wb, cb), (wa, ca) = totals["before"], totals["after"]
    print(f"{args.part}, layer {args.layer}, heads {args.heads} (shared machine: read the ratios)")
    print(f"  before: {wb:.2f} s wall, {cb:.2f} s CPU")
    print(f"  after:  {wa:.2f} s wall, {ca:.2f} s CPU")
    print(f"  after/before: wall {wa / wb:.3f}, CPU {ca / cb:.3f}")
    print(f"  results identical to the last bit: {same}")
    return {"totals": totals, "identical": same, "wall_ratio": wa / wb, "cpu_ratio": ca / cb}


if __name__ == "__main__":
    a = common.parse(build_parser(), QUICK)
    if a.child:
        _child(*a.child)
    else:
        common.run("layer_jobs_side_by_side", main, a, part=a.part)
