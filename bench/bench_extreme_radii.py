"""Benchmark (not a test): finite, sound answers at extreme radii and score widths.

Random small heads (`random_head_problem`) with weight scale 10^U(-1, 1) (0.1-10), radius 10^U(-4, log10 3)
(1e-4-3), n in 1..16 attended tokens, d in 1..8, d_h in 1..4, both norms, fixed and varying query
alternating. Per unit and function it records an exception, a NaN or an infinite result, and checks
soundness against 2 x 40 sampled feasible perturbations (`attncert.head.ball_samples.feasible_perturbations`):

    exact       exact_worst_case, max and min (fixed query): lo <= hi, hi >= every sampled value
                (min: lo <= every sampled value), relative width hi - lo over the value spread;
    first       first_order_certificate, max and min (both modes): >= every sampled value (min: <=);
    secant      secant_slack_bound(problem, exact hi) (fixed query): finite and >= 0; "B=0 wrong" counts
                B = 0 while some key has positive value excess and a positive score width (the old NaN
                secant factor silently dropped every key);
    ascent      best_feasible_ascent (4 starts x 40 steps, both modes): finite, and <= exact hi.

It prints one table of counts per function and, for the exact bracket, the largest relative width and
the number of units above 1e-10 of the value spread per bucket of the fixed-query score radius
R_s = r ||u_s||_*.

    .venv/bin/python -m bench.bench_extreme_radii [--units 500] [--seed 0] [--ref GIT_REF] [--quick]
        [--scale 0.1 10] [--radius 1e-4 3]     (e.g. --scale 1 10 --radius 0.1 3: the large-R_s regime)

--ref runs the same measurement on the source tree of a git revision (extracted with `git archive` into a
temporary directory, run in a subprocess) and prints its table first ("before"), then the working
tree's ("after").
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # 2 shared cores: avoid BLAS oversubscription
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from bench import common  # noqa: E402

REPO = common.REPO
BUCKETS = [0.0, 1.0, 10.0, 64.0, 370.0, 710.0, np.inf]
FUNCTIONS = ["exact_max", "exact_min", "first_max", "first_min", "secant", "ascent"]


def bucket_of(R_s: float) -> str:
    for a, b in zip(BUCKETS, BUCKETS[1:]):
        if a <= R_s < b:
            return f"[{a:g}, {b:g})"
    return "nan"


def measure(units: int, seed: int, scale_range=(0.1, 10.0), radius_range=(1e-4, 3.0)) -> dict:
    import torch

    from attncert.certify.best_feasible_ascent import best_feasible_ascent
    from attncert.certify.exact_worst_case import exact_worst_case
    from attncert.certify.first_order_certificate import first_order_certificate, score_value_intervals
    from attncert.certify.secant_slack_bound import secant_slack_bound
    from attncert.head.ball_samples import feasible_perturbations
    from attncert.head.fixed_query import fixed_query_reduction
    from attncert.head.problem import random_head_problem

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    counts = {f: defaultdict(int) for f in FUNCTIONS}
    width = defaultdict(lambda: [0, 0.0, 0])  # bucket -> [units, max relative width, units > 1e-10]
    status = defaultdict(int)
    examples = defaultdict(list)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()

    def record(fn, kind, note=""):
        counts[fn][kind] += 1
        if kind != "ok" and len(examples[fn]) < 3:
            examples[fn].append(note)

    def classify(x):
        if x is None:
            return "exception"
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf"
        return "ok"

    for u in range(units):
        scale = 10 ** rng.uniform(*np.log10(scale_range))
        r = 10 ** rng.uniform(*np.log10(radius_range))
        norm = ("linf", "l2")[u % 2]
        mode = ("fixed", "varying")[(u // 2) % 2]
        n, d, dh = int(rng.integers(1, 17)), int(rng.integers(1, 9)), int(rng.integers(1, 5))
        P = random_head_problem(rng, d=d, d_head=dh, n=n, radius=r, norm=norm, mode=mode, scale=scale)
        data = fixed_query_reduction(P)
        R_s = r * P.dual_norm(data.u_s)
        tag = f"unit {u} ({norm}, {mode}, n={n}, d={d}, scale={scale:.3g}, r={r:.3g}, R_s={R_s:.4g})"
        vals = np.array([P.value(P.Z0 + D) for D in feasible_perturbations(P, np.random.default_rng(u), 40)])
        vmax, vmin = float(vals.max()), float(vals.min())

        def call(fn, f):
            try:
                return f()
            except Exception as e:  # noqa: BLE001 - counted
                record(fn, "exception", f"{tag}: {type(e).__name__}: {e}"[:240])
                return None

        hi = None
        if mode == "fixed":
            for sense, fn in (("max", "exact_max"), ("min", "exact_min")):
                ex = call(fn, lambda: exact_worst_case(P, sense))
                if ex is None:
                    continue
                kind = classify(ex.lo) if classify(ex.lo) != "ok" else classify(ex.hi)
                if kind == "ok":
                    bad = ex.lo > ex.hi or (ex.hi < vmax if sense == "max" else ex.lo > vmin)
                    if bad:
                        kind = "unsound"
                record(fn, kind, f"{tag}: [{ex.lo!r}, {ex.hi!r}] sampled [{vmin!r}, {vmax!r}]")
                status[getattr(ex, "status", "n/a").split(":")[0]] += 1
                rw = ex.relative_width
                b = width[bucket_of(R_s)]
                b[0] += 1
                if math.isfinite(rw):
                    b[1] = max(b[1], rw)
                if not rw <= 1e-10:
                    b[2] += 1
                    counts[fn]["wide >1e-10"] += 1
                if sense == "max":
                    hi = ex.hi if kind == "ok" else None
        for sense, fn in (("max", "first_max"), ("min", "first_min")):
            fo = call(fn, lambda: first_order_certificate(P, sense))
            if fo is not None:
                kind = classify(fo)
                if kind == "ok" and (fo < vmax if sense == "max" else fo > vmin):
                    kind = "unsound"
                record(fn, kind, f"{tag}: {fo!r} sampled [{vmin!r}, {vmax!r}]")
        if mode == "fixed" and hi is not None:
            sb = call("secant", lambda: secant_slack_bound(P, hi))
            if sb is not None:
                kind = classify(sb.bound)
                if kind == "ok" and sb.bound < 0:
                    kind = "unsound"
                if kind == "ok" and sb.bound == 0:
                    l, uu, _, W = score_value_intervals(P)
                    if np.any((W - hi > 0) & (uu - l > 0)):
                        kind = "B=0 wrong"
                record("secant", kind, f"{tag}: B = {sb.bound!r}")
        asc = call("ascent", lambda: best_feasible_ascent(P, restarts=4, steps=40, screen=32, seed=u).value)
        if asc is not None:
            kind = classify(asc)
            if kind == "ok" and hi is not None and asc > hi:
                kind = "unsound"
            record("ascent", kind, f"{tag}: {asc!r} vs exact hi {hi!r}")
    return {"counts": {f: dict(c) for f, c in counts.items()}, "width": dict(width), "status": dict(status),
            "examples": dict(examples), "seconds": time.perf_counter() - t0, "units": units}


def print_tables(res: dict, label: str):
    print(f"\n== {label}: {res['units']} random units, {res['seconds']:.0f} s ==")
    kinds = ["ok", "exception", "nan", "inf", "unsound", "B=0 wrong", "wide >1e-10"]
    print(f"{'function':<11}" + "".join(f"{k:>13}" for k in kinds))
    for f in FUNCTIONS:
        c = res["counts"].get(f, {})
        print(f"{f:<11}" + "".join(f"{c.get(k, 0):>13}" for k in kinds))
    print("\nexact bracket (max and min) by fixed-query score radius R_s:")
    print(f"{'R_s bucket':<14}{'brackets':>10}{'max width/spread':>18}{'> 1e-10':>9}")
    for a, b in zip(BUCKETS, BUCKETS[1:]):
        key = f"[{a:g}, {b:g})"
        if key in res["width"]:
            m, w, k = res["width"][key]
            print(f"{key:<14}{m:>10}{w:>18.3g}{k:>9}")
    print("exact status:", ", ".join(f"{k} {v}" for k, v in sorted(res["status"].items())))
    for f, ex in res["examples"].items():
        for e in ex:
            print(f"  e.g. {f}: {e}")


QUICK = {"units": 40}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, nargs=2, default=(0.1, 10.0), help="weight scale range (log-uniform)")
    ap.add_argument("--radius", type=float, nargs=2, default=(1e-4, 3.0), help="radius range (log-uniform)")
    ap.add_argument("--ref", default=None, help="also measure this git revision (before)")
    ap.add_argument("--raw", default=None, help=argparse.SUPPRESS)  # the --ref child: raw result to this file
    return ap


def main(args) -> dict:
    out = {}
    if args.ref:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.ref, "src"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            raw = Path(tmp) / "res.json"
            env = dict(os.environ, PYTHONPATH=str(Path(tmp) / "src"))  # that revision's package first
            subprocess.run([sys.executable, "-m", "bench.bench_extreme_radii", "--units", str(args.units), "--seed",
                            str(args.seed), "--scale", *map(str, args.scale), "--radius", *map(str, args.radius),
                            "--raw", str(raw)], env=env, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
            out["before"] = json.loads(raw.read_text())
            print_tables(out["before"], f"before ({args.ref})")
    res = measure(args.units, args.seed, tuple(args.scale), tuple(args.radius))
    print_tables(res, "after (working tree)" if args.ref else "working tree")
    out["working_tree"] = res
    return out


if __name__ == "__main__":
    _args = common.parse(build_parser(), QUICK)
    if _args.raw:
        Path(_args.raw).write_text(
            json.dumps(measure(_args.units, _args.seed, tuple(_args.scale), tuple(_args.radius)))
        )
    else:
        common.run("bench_extreme_radii", main, _args)
