"""Benchmark of the second-order certificate at GPT-2 small dimensions (not a test).

Units: random heads with d = 768, d_head = 64, n = 16 attended tokens, query = last token, linf balls.
Weights of GPT-2-like scale: W_Q, W_K, W_V entries N(0, 0.14^2) (GPT-2 small's c_attn weights have a
standard deviation of roughly 0.1-0.2), biases N(0, 0.3^2) for b_Q and N(0, 0.1^2) for b_K, b_V.
LayerNorm-like tokens: z = gain * (x - mean x) / std x + bias with x ~ N(0, I), gain ~ |N(0.25, 0.1^2)|,
bias ~ N(0, 0.05^2) per feature (shared by the tokens of a head). Specification: a random unit c.

Printed: median seconds per unit (fixed and varying query; the one-time cvxpy compile of each shape is
timed separately), next to the paper's 10 s and 22 s; the relative gap (second_order - exact) / (exact -
nominal) at r = 0.002 and 0.02 for the fixed query (exact = the certified bracket's upper end), and
(second_order - best feasible) / (best feasible - nominal) for the varying query (best feasible = multi-
start ascent, a lower bound of the true maximum, so this over-states the gap); the first-order certificate's
relative gap and gap / secant-slack bound for comparison; the per-unit log-log slope of the fixed-query
gap over r in {0.001, 0.002, 0.005}.

    .venv/bin/python -m bench.bench_second_order [--heads 6] [--varying-heads 4] [--tight] [--quick]

Unit timing (--unit-ns): one fixed-query unit per n (seed --seed, linf, r = --radius), the certificate timed
--repeats times after one warm-up call (min and median seconds), its gap as a share of the first-order gap,
(SO - exact) / (FO - exact), and with --profile a cProfile of one more call (pstats text, top 30 by cumulative and
by internal time) under bench/results/profiles/:

    .venv/bin/python -m bench.bench_second_order --unit-ns 64 1024 --seed 7 --profile --part NAME

BLAS runs single-threaded (set below, before numpy is imported): on a 2-core machine shared with other
jobs, multi-threaded OpenBLAS spin-waits on the many tiny products and doubles the time per unit.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import pstats  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from attncert.certify.exact_worst_case import exact_worst_case  # noqa: E402
from attncert.certify.first_order_certificate import first_order_certificate  # noqa: E402
from attncert.certify.secant_slack_bound import secant_slack_bound  # noqa: E402
from attncert.certify.second_order.certificate import second_order_certificate  # noqa: E402
from attncert.head.problem import HeadProblem  # noqa: E402
from attncert.paper_comparison.claims import load_claims  # noqa: E402
from bench import common  # noqa: E402

_PAPER = {c.id: c.value for c in load_claims(common.REPO / "data" / "paper_claims.yaml").claims}
PAPER_SECONDS = {"fixed": _PAPER["cert_seconds_fixed"], "varying": _PAPER["cert_seconds_varying"]}
PAPER_REL_GAP = {0.002: _PAPER["second_order_rel_gap_r0.002"], 0.02: _PAPER["second_order_rel_gap_r0.02"]}
PAPER_SLOPE = _PAPER["second_order_slope"]


def gpt2_like_head(seed: int, radius: float, mode: str = "fixed", d: int = 768, d_head: int = 64, n: int = 16,
                   weight_std: float = 0.14) -> HeadProblem:
    rng = np.random.default_rng(seed)
    W = [rng.standard_normal((d, d_head)) * weight_std for _ in range(3)]
    b = [rng.standard_normal(d_head) * s for s in (0.3, 0.1, 0.1)]
    gain = np.abs(0.25 + 0.1 * rng.standard_normal(d))
    bias = 0.05 * rng.standard_normal(d)
    X = rng.standard_normal((n, d))
    Z0 = (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True) * gain + bias
    c = rng.standard_normal(d_head)
    c /= np.linalg.norm(c)
    return HeadProblem(W[0], W[1], W[2], b[0], b[1], b[2], Z0, n - 1, c, radius, "linf", mode)


def _timed(problem: HeadProblem, tight: bool):
    t0 = time.perf_counter()
    res = second_order_certificate(problem, upper_cone=tight)
    return res, time.perf_counter() - t0


QUICK = {"heads": 1, "varying_heads": 1}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=6, help="random heads, fixed query")
    ap.add_argument("--varying-heads", type=int, default=4, help="random heads, varying query")
    ap.add_argument("--tight", action="store_true", help="add the upper exponential cone (tight variant)")
    ap.add_argument("--unit-ns", type=int, nargs="+", help="only time one fixed-query unit per number of keys")
    ap.add_argument("--seed", type=int, default=7, help="the unit's seed (--unit-ns)")
    ap.add_argument("--radius", type=float, default=0.002, help="the unit's radius (--unit-ns)")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per unit (--unit-ns)")
    ap.add_argument("--profile", action="store_true", help="write a cProfile of one call per unit (--unit-ns)")
    ap.add_argument("--part", help="a name for this result (bench_second_order-PART)")
    return ap


def _profile_text(problem: HeadProblem, tight: bool) -> str:
    prof = cProfile.Profile()
    prof.enable()
    second_order_certificate(problem, upper_cone=tight)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).strip_dirs()
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(30)
    return out.getvalue()


def unit_timing(args) -> dict:
    """Seconds and gap of the fixed-query certificate on one unit per n (module docstring, --unit-ns)."""
    variant = "tight" if args.tight else "paper-like"
    print(f"fixed-query second-order certificate ({variant}), seed {args.seed}, linf, r = {args.radius}, "
          f"d=768, d_head=64; seconds on 2 shared cores (noisy: compare runs by ratio and profile shares)")
    rows = {}
    for n in args.unit_ns:
        hp = gpt2_like_head(args.seed, args.radius, n=n)
        res, _ = _timed(hp, args.tight)  # warm-up: imports and first-call set-up
        secs = [_timed(hp, args.tight)[1] for _ in range(args.repeats)]
        ex = exact_worst_case(hp)
        fo = first_order_certificate(hp)
        share = (res.value - ex.hi) / (fo - ex.hi)
        rows[n] = {"seconds_min": min(secs), "seconds_median": float(np.median(secs)), "value": res.value,
                   "exact_hi": ex.hi, "first_order": fo, "gap_share_of_first_order": share,
                   "status": res.status, "fallback": bool(res.fallback)}
        print(f"  n={n:5d}  {min(secs):6.3f} s min, {np.median(secs):6.3f} s median of {args.repeats}   "
              f"value {res.value!r}   (SO - exact)/(FO - exact) {share:.10f}")
        if args.profile:
            path = args.results / "profiles" / f"{common.result_name('bench_second_order', args, args.part)}-n{n}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# cProfile of second_order_certificate, seed {args.seed}, linf, r = {args.radius}, "
                            f"n = {n}, {variant}\n" + _profile_text(hp, args.tight))
            print(f"  profile: {path.relative_to(common.REPO) if path.is_relative_to(common.REPO) else path}")
    return {"variant": variant, "seed": args.seed, "radius": args.radius, "units": rows}


def main(args) -> dict:
    warnings.filterwarnings("ignore")
    if args.unit_ns:
        return unit_timing(args)
    variant = (
        "tight (upper exponential cone)" if args.tight else "paper (lower cone + secant + couplings + monotone cuts)"
    )
    print(f"second-order certificate, variant: {variant}; d=768, d_head=64, n=16, linf")

    # compile once per shape (timed separately)
    for mode in ("fixed", "varying"):
        _, sec = _timed(gpt2_like_head(10_000, 0.002, mode), args.tight)
        print(f"first call ({mode}, includes the one-time cvxpy compile of the shape): {sec:.2f} s")

    radii_slope = (0.001, 0.002, 0.005)
    radii = sorted(set(radii_slope) | {0.02})
    times = {"fixed": [], "varying": []}
    rel = {r: [] for r in radii}
    rel_fo = {r: [] for r in radii}
    ratio_B = {r: [] for r in radii}
    slopes, fallbacks = [], 0
    for seed in range(args.heads):
        gaps = []
        for r in radii:
            hp = gpt2_like_head(seed, r)
            res, sec = _timed(hp, args.tight)
            times["fixed"].append(sec)
            fallbacks += res.fallback
            ex = exact_worst_case(hp)
            move = ex.hi - hp.nominal_value()
            gap = res.value - ex.hi
            rel[r].append(gap / move)
            rel_fo[r].append((first_order_certificate(hp) - ex.hi) / move)
            ratio_B[r].append(gap / secant_slack_bound(hp, ex.hi).bound)
            if r in radii_slope:
                gaps.append(gap)
        slopes.append(np.polyfit(np.log(radii_slope), np.log(np.maximum(gaps, 1e-300)), 1)[0])

    from attncert.certify.best_feasible_ascent import best_feasible_ascent

    rel_v = {0.002: [], 0.02: []}
    rel_v_fo = {0.002: [], 0.02: []}
    for seed in range(args.varying_heads):
        for r in (0.002, 0.02):
            hp = gpt2_like_head(seed, r, "varying")
            res, sec = _timed(hp, args.tight)
            times["varying"].append(sec)
            fallbacks += res.fallback
            best = best_feasible_ascent(hp, restarts=8, steps=80, seed=seed).value
            move = best - hp.nominal_value()
            rel_v[r].append((res.value - best) / move)
            rel_v_fo[r].append((first_order_certificate(hp) - best) / move)

    print()
    print("median seconds per unit (this machine, 2 shared cores)   paper")
    for mode in ("fixed", "varying"):
        t = np.array(times[mode])
        print(
            f"  {mode:8s} {np.median(t):7.2f} s  (max {t.max():.2f} s, {t.size} units)       "
            f"{PAPER_SECONDS[mode]:5.1f} s"
        )
    print()
    print("fixed query: relative gap (SO - exact)/(exact - nominal), median [min, max] over heads")
    for r in radii:
        a, f, q = np.array(rel[r]), np.array(rel_fo[r]), np.array(ratio_B[r])
        paper = f"   paper {PAPER_REL_GAP[r]}" if r in PAPER_REL_GAP else ""
        print(f"  r={r:<6} SO {np.median(a):.4f} [{a.min():.4f}, {a.max():.4f}]   FO {np.median(f):.3f}"
              f"   gap/secant-bound max {q.max():.3f}{paper}")
    s = np.array(slopes)
    print(f"  per-unit log-log slope of the SO gap over r in {radii_slope}: median {np.median(s):.2f} "
          f"[{s.min():.2f}, {s.max():.2f}]   (paper {PAPER_SLOPE})")
    print()
    print("varying query: (SO - best feasible)/(best feasible - nominal), median [min, max]; best feasible = ascent")
    for r in (0.002, 0.02):
        a, f = np.array(rel_v[r]), np.array(rel_v_fo[r])
        print(f"  r={r:<6} SO {np.median(a):.4f} [{a.min():.4f}, {a.max():.4f}]   FO {np.median(f):.3f}")
    print(f"\nfallbacks to the first-order certificate: {fallbacks}")
    med = lambda v: float(np.median(v))  # noqa: E731
    return {
        "variant": variant,
        "seconds_median": {m: med(t) for m, t in times.items()},
        "paper_seconds": PAPER_SECONDS,
        "fallbacks": int(fallbacks),
        "fixed_rel_gap_median": {r: med(rel[r]) for r in radii},
        "fixed_first_order_rel_gap_median": {r: med(rel_fo[r]) for r in radii},
        "fixed_gap_over_secant_max": {r: float(np.max(ratio_B[r])) for r in radii},
        "fixed_slope_median": med(slopes),
        "varying_rel_gap_median": {r: med(rel_v[r]) for r in rel_v},
        "paper_rel_gap": PAPER_REL_GAP,
        "paper_slope": PAPER_SLOPE,
    }


if __name__ == "__main__":
    _args = common.parse(build_parser(), QUICK)
    common.run("bench_second_order", main, _args, _args.part)
