"""Benchmark (not a test): time per call of the audit's exact-upper check, and whether it passes.

Synthetic units of the default model's shape (all-MiniLM-L6-v2: d = 384, d_head = 32, n = 8 attended
tokens; weights N(0, 0.14^2), standardized tokens times |N(0.25, 0.1)| gains, unit random c), fixed query,
both norms, the default run's radii and two large ones. Per unit: the exact solver's bracket [lo, hi]
(not timed), then `attncert.audit.exact_upper.exact_upper_check` at hi with the float64 reduction's
error bounds as ball radii and the solver's witness as hints (best of 3 wall-clock calls, single thread).
It reports per (norm, radius): milliseconds per call (median, max), how many units pass at hi (must be
all), how many pass at lo - 1e-6 spread (must be none), the smallest relative margin and the mean number
of tokens bounded by the positive-token bound; and the time to build the input balls from floats (the
caller's cost, not included in the call).

    .venv/bin/python -m bench.bench_exact_upper [--units 10] [--radii 0.0005 0.001 ...] [--quick]
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # 2 shared cores: avoid BLAS oversubscription
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from flint import arb  # noqa: E402

from bench import common  # noqa: E402

from attncert.audit.exact_upper import exact_upper_check  # noqa: E402
from attncert.certify.exact_worst_case import exact_worst_case  # noqa: E402
from attncert.head.fixed_query import fixed_query_reduction  # noqa: E402
from attncert.head.problem import HeadProblem  # noqa: E402

QUICK = {"units": 2, "radii": [0.001, 0.02]}


def minilm_sized_unit(rng, radius, norm, d=384, d_head=32, n=8) -> HeadProblem:
    W = [rng.standard_normal((d, d_head)) * 0.14 for _ in range(3)]
    b = [rng.standard_normal(d_head) * 0.1 for _ in range(3)]
    x = rng.standard_normal((n, d))
    Z0 = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True) * np.abs(rng.normal(0.25, 0.1, d))
    c = rng.standard_normal(d_head)
    return HeadProblem(W[0], W[1], W[2], b[0], b[1], b[2], Z0, n - 1, c / np.linalg.norm(c), radius, norm, "fixed")


def inputs_of(problem):
    red = fixed_query_reduction(problem)
    pairs = ((red.s0, red.err_s0), (red.w0, red.err_w0), (red.u_s, red.err_us), (red.u_w, red.err_uw))
    return tuple([arb(float(x), float(e)) for x, e in zip(v, err)] for v, err in pairs), red


def main(args) -> dict:
    rows, build = [], []
    print("| norm | radius | units | ms per call (median) | ms (max) | pass at hi | pass at lo - 1e-6 spread "
          "| smallest margin | positive tokens (mean) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for norm in ("linf", "l2"):
        for radius in args.radii:
            rng = np.random.default_rng(args.seed)
            ms, passed, below, margins, pos = [], 0, 0, [], []
            for _ in range(args.units):
                problem = minilm_sized_unit(rng, radius, norm)
                ex = exact_worst_case(problem)
                t0 = time.perf_counter()
                inputs, red = inputs_of(problem)
                build.append(time.perf_counter() - t0)
                D = ex.witness - problem.Z0
                x0 = np.stack([D @ red.u_s, D @ red.u_w], axis=1)
                best = np.inf
                for _ in range(3):
                    t0 = time.perf_counter()
                    res = exact_upper_check(*inputs, radius, norm, ex.hi, x0)
                    best = min(best, time.perf_counter() - t0)
                ms.append(1e3 * best)
                passed += res.passed
                margins.append(res.margin)
                pos.append(res.positive_tokens)
                below += exact_upper_check(*inputs, radius, norm, ex.lo - 1e-6 * ex.value_spread, x0).passed
            row = dict(norm=norm, radius=radius, units=args.units, ms_median=float(np.median(ms)),
                       ms_max=float(np.max(ms)), passed=int(passed), passed_below=int(below),
                       smallest_margin=float(np.min(margins)), positive_tokens=float(np.mean(pos)))
            rows.append(row)
            print(f"| {norm} | {radius:g} | {args.units} | {row['ms_median']:.2f} | {row['ms_max']:.2f} | "
                  f"{passed}/{args.units} | {below}/{args.units} | {row['smallest_margin']:.2e} | "
                  f"{row['positive_tokens']:.1f} |")
    print(f"\nbuilding the input balls from float64 (caller's cost): {1e3 * np.median(build):.2f} ms per unit (median)")
    return {"rows": rows, "build_ms_median": float(1e3 * np.median(build))}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=10, help="units per (norm, radius)")
    ap.add_argument("--radii", type=float, nargs="+", default=[0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.1, 1.0])
    ap.add_argument("--seed", type=int, default=0)
    return ap


if __name__ == "__main__":
    common.run("bench_exact_upper", main, common.parse(build_parser(), QUICK))
