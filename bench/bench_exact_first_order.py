"""Benchmark (not a test): exact fixed-query worst case vs first-order certificate vs ascent, GPT-2 dims.

Synthetic GPT-2-small-like units: d = 768, d_head = 64, n = 16 attended tokens, weights N(0, 0.14^2)
(so scores q.k/8 have O(1) spread), LayerNorm-like tokens z = gain * standardize(x) + bias with
gain ~ |N(0.25, 0.1)|, bias ~ N(0, 0.05), unit random specification c. Prints the median CPU time
per unit (single-threaded; max and min directions timed separately), the largest bracket width /
value spread, and the first-order gap relative to the output movement range (exact.hi - nominal).

    .venv/bin/python -m bench.bench_exact_first_order [--units 20] [--shortfall-units 40] [--quick]

The second part measures how often multi-start ascent alone falls short of the exact value (fixed
query, larger radii): shortfall = exact.lo - ascent > tol * (exact.lo - nominal value).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # 2 shared cores: avoid BLAS oversubscription
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

from bench import common  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from attncert.certify.best_feasible_ascent import best_feasible_ascent  # noqa: E402
from attncert.certify.exact_worst_case import exact_worst_case  # noqa: E402
from attncert.certify.first_order_certificate import bilinear_bound, first_order_certificate  # noqa: E402
from attncert.head.problem import HeadProblem, random_head_problem  # noqa: E402


def gpt2_like_unit(rng: np.random.Generator, radius: float, norm: str, d=768, d_head=64, n=16,
                   mode="fixed", w_std=0.14) -> HeadProblem:
    W = [rng.standard_normal((d, d_head)) * w_std for _ in range(3)]
    b = [rng.standard_normal(d_head) * 0.1 for _ in range(3)]
    x = rng.standard_normal((n, d))
    x = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)
    gain = np.abs(rng.normal(0.25, 0.1, d))
    bias = rng.normal(0.0, 0.05, d)
    Z0 = x * gain + bias
    c = rng.standard_normal(d_head)
    c /= np.linalg.norm(c)
    return HeadProblem(W[0], W[1], W[2], b[0], b[1], b[2], Z0, n - 1, c, radius, norm, mode)


def timed(fn, *args, **kw):
    """CPU seconds of one call (single-threaded BLAS/torch, so robust to other load on the machine)."""
    t = time.process_time()
    out = fn(*args, **kw)
    return out, time.process_time() - t


QUICK = {"units": 2, "ascent_units": 1, "shortfall_units": 3, "small_units": 10}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=20, help="units per (norm, radius)")
    ap.add_argument("--ascent-units", type=int, default=3)
    ap.add_argument("--shortfall-units", type=int, default=40)
    ap.add_argument("--shortfall-n", type=int, default=8)
    ap.add_argument("--small-units", type=int, default=200)
    return ap


def main(args) -> dict:
    torch.set_num_threads(1)
    result = {"fixed": [], "varying": [], "shortfall": [], "shortfall_small": []}

    print("== CPU time per unit (median), GPT-2 dims d=768 d_head=64 n=16, fixed query ==")
    print(f"{'norm':5s} {'r':>6s} | {'exact max':>10s} {'exact min':>10s} {'iters':>5s} {'width/spread':>12s} |"
          f" {'first-order':>11s} | {'ascent':>8s} | {'FO gap/range':>12s}")
    for norm in ("linf", "l2"):
        for radius in (0.001, 0.005, 0.02):
            rng = np.random.default_rng(12345)
            te, tm, tf, ta, widths, iters, fo_gap = [], [], [], [], [], [], []
            for u in range(args.units):
                P = gpt2_like_unit(rng, radius, norm)
                ex, s1 = timed(exact_worst_case, P)
                exm, s2 = timed(exact_worst_case, P, "min")
                fo, s3 = timed(first_order_certificate, P)
                assert fo >= ex.hi >= ex.lo and exm.hi >= exm.lo
                te.append(s1), tm.append(s2), tf.append(s3)
                widths.append(max(ex.relative_width, exm.relative_width))
                iters.append(ex.iterations)
                fo_gap.append((fo - ex.hi) / (ex.hi - P.nominal_value()))
                if u < args.ascent_units:
                    _, s4 = timed(best_feasible_ascent, P, restarts=16, steps=200, seed=u)
                    ta.append(s4)
            med = lambda v: float(np.median(v)) * 1e3  # noqa: E731
            result["fixed"].append({"norm": norm, "radius": radius, "exact_max_ms": med(te), "exact_min_ms": med(tm),
                                    "iterations": float(np.median(iters)), "width_over_spread": max(widths),
                                    "first_order_ms": med(tf), "ascent_ms": med(ta),
                                    "first_order_gap_over_range": float(np.median(fo_gap))})
            print(f"{norm:5s} {radius:6.3f} | {med(te):8.2f}ms {med(tm):8.2f}ms {np.median(iters):5.0f} "
                  f"{max(widths):12.1e} | {med(tf):9.3f}ms | {med(ta):6.0f}ms | {np.median(fo_gap):12.3f}")

    print("\n== varying query (no exact value): first order vs best ascent, CPU time per unit (median) ==")
    print(f"{'norm':5s} {'r':>6s} | {'first-order':>11s} {'(beta cached)':>13s} | {'ascent':>8s} |"
          " (FO - ascent)/(ascent - nominal)")
    for norm in ("linf", "l2"):
        for radius in (0.001, 0.005, 0.02):
            rng = np.random.default_rng(4321)
            tf, tb, ta, gap = [], [], [], []
            for u in range(args.units):
                P = gpt2_like_unit(rng, radius, norm, mode="varying")
                fo, s1 = timed(first_order_certificate, P)
                beta = bilinear_bound(P)  # depends on the head only: computed once per head in a pipeline
                fo_b, s3 = timed(first_order_certificate, P, beta=beta)
                assert fo_b == fo
                tf.append(s1), tb.append(s3)
                if u < args.ascent_units:
                    asc, s2 = timed(best_feasible_ascent, P, restarts=16, steps=200, seed=u)
                    assert fo >= asc.value
                    ta.append(s2)
                    gap.append((fo - asc.value) / (asc.value - P.nominal_value()))
            result["varying"].append(
                {
                    "norm": norm,
                    "radius": radius,
                    "first_order_ms": np.median(tf) * 1e3,
                    "first_order_beta_cached_ms": np.median(tb) * 1e3,
                    "ascent_ms": np.median(ta) * 1e3,
                    "first_order_gap_over_ascent_range": float(np.median(gap)),
                }
            )
            print(f"{norm:5s} {radius:6.3f} | {np.median(tf) * 1e3:9.3f}ms {np.median(tb) * 1e3:11.3f}ms |"
                  f" {np.median(ta) * 1e3:6.0f}ms | {np.median(gap):8.3f}")

    if args.shortfall_units <= 0:
        return result
    print(f"\n== ascent alone vs exact (fixed query, GPT-2 dims, n={args.shortfall_n}, "
          f"{args.shortfall_units} units per cell, restarts=16, steps=200) ==")
    print(f"{'norm':5s} {'r':>6s} | short(>1e-6) short(>1e-3)  median shortfall/range  max shortfall/range")
    for norm in ("linf", "l2"):
        for radius in (0.005, 0.01, 0.02):
            rng = np.random.default_rng(777)
            rel = []
            for u in range(args.shortfall_units):
                P = gpt2_like_unit(rng, radius, norm, n=args.shortfall_n)
                ex = exact_worst_case(P)
                asc = best_feasible_ascent(P, restarts=16, steps=200, seed=u)
                assert asc.value <= ex.hi
                rel.append((ex.lo - asc.value) / max(ex.lo - P.nominal_value(), 1e-300))
            rel = np.array(rel)
            result["shortfall"].append({"norm": norm, "radius": radius, "short_1e-6": float(np.mean(rel > 1e-6)),
                                        "short_1e-3": float(np.mean(rel > 1e-3)), "median": float(np.median(rel)),
                                        "max": float(rel.max())})
            print(f"{norm:5s} {radius:6.3f} | {np.mean(rel > 1e-6):11.0%} {np.mean(rel > 1e-3):12.0%}"
                  f"  {np.median(rel):22.2e}  {rel.max():19.2e}")

    if args.small_units <= 0:
        return result
    print(f"\n== the same on small random heads (d=6, d_head=3, n=5, weights N(0,1)), {args.small_units} units ==")
    print(f"{'norm':5s} {'r':>6s} | short(>1e-6) short(>1e-3)  median shortfall/range  max shortfall/range")
    for norm in ("linf", "l2"):
        for radius in (0.1, 0.3, 1.0):
            rng = np.random.default_rng(99)
            rel = []
            for u in range(args.small_units):
                P = random_head_problem(rng, d=6, d_head=3, n=5, radius=radius, norm=norm)
                ex = exact_worst_case(P)
                asc = best_feasible_ascent(P, restarts=16, steps=200, seed=u)
                assert asc.value <= ex.hi
                rel.append((ex.lo - asc.value) / max(ex.lo - P.nominal_value(), 1e-300))
            rel = np.array(rel)
            result["shortfall_small"].append({"norm": norm, "radius": radius, "short_1e-6": float(np.mean(rel > 1e-6)),
                                              "short_1e-3": float(np.mean(rel > 1e-3)), "median": float(np.median(rel)),
                                              "max": float(rel.max())})
            print(f"{norm:5s} {radius:6.3f} | {np.mean(rel > 1e-6):11.0%} {np.mean(rel > 1e-3):12.0%}"
                  f"  {np.median(rel):22.2e}  {rel.max():19.2e}")

    return result


if __name__ == "__main__":
    common.run("bench_exact_first_order", main, common.parse(build_parser(), QUICK))
