"""Certificate time vs CROWN time by number of tokens, and the equality checks of the faster certificate path.

    .venv/bin/python -m bench.bench_certificate_ratio time  [--groups G] [--reps R] [--positions 1,4,8,15]
                                                            [--modes fixed,varying]
    .venv/bin/python -m bench.bench_certificate_ratio equal [--sample N] [--seed S]
    .venv/bin/python -m bench.bench_certificate_ratio varying [--groups G] [--seed S]
    (each also with --quick; the result is bench/results/bench_certificate_ratio-PART[-quick].md)

Model: `random-gpt2` (GPT-2 small's shapes, seeded random weights: costs, not results), layer 5, the paper grid's
prompts and specifications, built by bench/paper_cost.py's extraction and sampler.

time   per query position (n = position + 1 tokens) and mode, G groups of (head, prompt) drawn with a fixed seed,
       each at the 4 baseline radii. Per group and repetition: CROWN (`baseline_upper_bounds(..., "crown")`, all
       radii in one call, wall time / 4, as the pipeline and paper_cost.py do), then per unit the certificate
       (first order + second order, the paper's) and its tight variant on a fresh problem object. The caches
       keyed by the weights' contents are cleared before every group (shared within a group, as in a run).
       Reported: medians over units of the per-unit minimum over R repetitions, and their ratio.
equal  on units drawn by paper_cost.py's sampler (--sample, --seed): every certified number with the compiled
       solve path against cvxpy's (`solve_ladder.USE_COMPILED`, must be bit for bit equal), and the
       fixed query's initial facets against the two-edge rule (`facets.NEAR_EDGES` = 1: tighter or looser, by how
       much of the movement first order - nominal and of the gap to the exact bracket, how often beyond the
       solve's own reported dual gap), each certificate checked against the exact bracket.
varying the factored varying-query program (n = 5, the 4 baseline radii, G groups of (head, prompt) drawn with
       --seed) with today's solver settings (`factored.FACTORED_LADDER`, `VARYING_CUT_STOP`) against the
       alternative (`SOLVER_LADDER` with SCS, the fixed query's `CUT_STOP`), side by side on the same units:
       seconds per unit (median, mean, p90), solves per unit, units that went to the unfactored program, and
       (new - alternative) / movement (first order - nominal); each certificate checked against a short ascent.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import os

import time

import numpy as np

import bench.paper_cost as pc  # noqa: E402  (sets the thread variables)

import torch  # noqa: E402

import attncert.certify.first_order_certificate as foc  # noqa: E402
import attncert.certify.second_order.dual_bound.solve_ladder as dc  # noqa: E402
import attncert.certify.second_order.fixed_query.monolithic as fx  # noqa: E402
import attncert.certify.second_order.varying_query.data as vq  # noqa: E402
import attncert.head.fixed_query as fq  # noqa: E402
from attncert.baselines.linear_bound_baselines import baseline_upper_bounds  # noqa: E402
from attncert.certify.exact_worst_case import exact_worst_case  # noqa: E402
from attncert.certify.first_order_certificate import first_order_certificate  # noqa: E402
from attncert.certify.second_order.certificate import second_order_certificate  # noqa: E402
from attncert.head.reduced_geometry import reduced_geometry  # noqa: E402
from attncert.head.units import Unit, head_problem, specification_vectors  # noqa: E402
from bench import common  # noqa: E402

L = 5


def setup():
    cfg = copy.deepcopy(pc.load_config(pc.REPO / "workflow" / "config" / "paper.yaml"))
    cfg["model"] = dict(pc.RANDOM_GPT2)
    arrays, _ = pc.extract(cfg, [L])
    qps = list(cfg["certify"]["query_positions"])
    return cfg, arrays[L], qps, specification_vectors(arrays[L], L, qps, cfg["spec_seed"])


def clear_caches():
    """The caches keyed by the weights' contents (none on a checkout before them: `time` runs there too)."""
    for f in (getattr(fq, "_reduction", None), getattr(fq, "_long_double", None), getattr(foc, "_bilinear_bound", None),
              getattr(foc, "head_bilinear_bound", None), getattr(vq, "bilinear_norm", None),
              getattr(foc, "diagonal_scalings", None)):
        if hasattr(f, "cache_clear"):
            f.cache_clear()


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_time(args):
    cfg, arr, qps, spec = setup()
    radii = cfg["baselines"]["radii"]
    rng = np.random.default_rng(1)
    print("| mode | n | units | certificate s | tight s | CROWN s | certificate / CROWN | tight / CROWN |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for md in args.modes.split(","):
        for qp in map(int, args.positions.split(",")):
            hp = [(int(rng.integers(12)), int(rng.integers(cfg["n_prompts"]))) for _ in range(args.groups)]
            groups = [
                [head_problem(arr, spec, qps, Unit(L, h, p, qp, float(r), "linf", md)) for r in radii] for h, p in hp
            ]
            baseline_upper_bounds(groups[0], "crown")
            second_order_certificate(dataclasses.replace(groups[0][0]))  # builds the program of this shape
            t = {k: [[math.inf] * len(g) for g in groups] for k in ("cert", "tight", "crown")}
            for _ in range(args.reps):
                for gi, g in enumerate(groups):
                    clear_caches()
                    for k, res in enumerate(baseline_upper_bounds(g, "crown")):
                        t["crown"][gi][k] = min(t["crown"][gi][k], res.seconds)
                    for k, p in enumerate(g):
                        q = dataclasses.replace(p)
                        t["cert"][gi][k] = min(t["cert"][gi][k], timed(lambda: (first_order_certificate(q),
                                                                                 second_order_certificate(q))))
                        q = dataclasses.replace(p)
                        t["tight"][gi][k] = min(
                            t["tight"][gi][k], timed(lambda: second_order_certificate(q, upper_cone=True))
                        )
            m = {k: float(np.median(np.concatenate(v))) for k, v in t.items()}
            print(
                f"| {md} | {qp + 1} | {len(groups) * len(radii)} | {m['cert']:.4f} | {m['tight']:.4f} | "
                f"{m['crown']:.4f} | "
                f"{m['cert'] / m['crown']:.2f} | {m['tight'] / m['crown']:.2f} |",
                flush=True,
            )
    print(
        f"\nload average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; groups {args.groups}, repetitions "
        f"{args.reps}"
    )


def run_equal(args):
    cfg, arr, qps, spec = setup()
    units, _ = pc.sample_units(cfg, L, args.sample, np.random.default_rng(args.seed))
    near = fx.NEAR_EDGES
    bitwise, checked, stats = 0, 0, {}
    for u in units:
        p = head_problem(arr, spec, qps, u)
        movement = first_order_certificate(p) - p.nominal_value()
        hi = exact_worst_case(p).hi if u.mode == "fixed" else None
        for tight in (False, True):
            new = second_order_certificate(dataclasses.replace(p), upper_cone=tight)
            dc.USE_COMPILED = False
            slow = second_order_certificate(dataclasses.replace(p), upper_cone=tight)
            dc.USE_COMPILED = True
            checked += 1
            bitwise += new.value == slow.value
            if hi is not None:
                assert new.value >= hi - 1e-9 * (1.0 + abs(hi)), (u, tight, new.value, hi)
                fx.NEAR_EDGES = 1
                old = second_order_certificate(dataclasses.replace(p), upper_cone=tight)
                fx.NEAR_EDGES = near
                d = new.value - old.value
                s = stats.setdefault(("tight" if tight else "paper", u.query_pos + 1), [])
                s.append((d / movement, d / max(old.value - hi, 1e-300), d > 1e-12 * (1 + abs(old.value)),
                          d > max(new.dual_gap, 0.0) + 1e-12 * (1 + abs(old.value)), new.rounds, old.rounds))
    print(f"compiled solve path vs cvxpy's: {bitwise} of {checked} certificates bit for bit equal "
          f"({len(units)} units x paper and tight)\n")
    print(
        "Fixed query, initial facets with the consecutive edges vs the two-edge rule NEAR_EDGES = 1 (per variant and "
        "n):\n"
    )
    print("| variant | n | units | tighter | looser | looser beyond own dual gap | (new - old) / movement: min, max | "
          "(new - old) / gap: min, max | solves per unit new / two-edge |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (var, n), s in sorted(stats.items()):
        a = np.array(s, dtype=float)
        print(f"| {var} | {n} | {len(a)} | {int((a[:, 0] < 0).sum())} | {int(a[:, 2].sum())} | {int(a[:, 3].sum())} | "
              f"{a[:, 0].min():.1e}, {a[:, 0].max():.1e} | {a[:, 1].min():.1e}, {a[:, 1].max():.1e} | "
              f"{a[:, 4].mean():.2f} / {a[:, 5].mean():.2f} |")
    print("\nEvery certificate is above the exact bracket's upper end (checked).")


def run_varying(args):
    import attncert.certify.second_order.relaxation.facets as fc
    import attncert.certify.second_order.varying_query.factored as vf
    from attncert.certify.best_feasible_ascent import best_feasible_ascent

    cfg, arr, qps, spec = setup()
    rng = np.random.default_rng(args.seed)
    hp = [(int(rng.integers(12)), int(rng.integers(cfg["n_prompts"]))) for _ in range(args.groups)]
    units = [head_problem(arr, spec, qps, Unit(L, h, p, 4, float(r), "linf", "varying"))
             for h, p in hp for r in cfg["baselines"]["radii"]]
    warm = dataclasses.replace(units[0])
    vf.second_order_varying_factored(warm, reduced_geometry(warm))  # builds the program of this shape
    now_stop = vf.VARYING_CUT_STOP
    out = {}
    for name, ladder, stop in (("SCS ladder, fixed cut stop", dc.SOLVER_LADDER, fc.CUT_STOP), ("new", None, now_stop)):
        vf.VARYING_CUT_STOP = stop
        rows = []
        for p in units:
            q = dataclasses.replace(p)
            t0 = time.perf_counter()
            res = vf.second_order_varying_factored(q, reduced_geometry(q), ladder=ladder)
            rows.append((time.perf_counter() - t0, res.value, len(res.log), "unfactored" in res.status, res.fallback))
        out[name] = rows
    vf.VARYING_CUT_STOP = now_stop
    move = np.array([first_order_certificate(p) - p.nominal_value() for p in units])
    best = np.array([best_feasible_ascent(dataclasses.replace(p), restarts=4, steps=100).value for p in units])
    print("| settings | units | s/unit median | mean | p90 | solves per unit | unfactored | fallbacks | below ascent |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, rows in out.items():
        a = np.array(rows, dtype=float)
        print(
            f"| {name} | {len(a)} | {np.median(a[:, 0]):.4f} | {a[:, 0].mean():.4f} | {np.percentile(a[:, 0], 90):.4f} "
            f"| {a[:, 2].mean():.2f} | {int(a[:, 3].sum())} | {int(a[:, 4].sum())} | {int((a[:, 1] < best).sum())} |"
        )
    d = (np.array([r[1] for r in out["new"]]) - np.array([r[1] for r in out["SCS ladder, fixed cut stop"]])) / move
    print(f"\n(new - SCS ladder) / movement: min {d.min():.2e}, median {np.median(d):.2e}, max {d.max():.2e}; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


QUICK = {"groups": 1, "reps": 1, "positions": "4", "sample": 4}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=["time", "equal", "varying"])
    ap.add_argument("--groups", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--positions", default="1,4,8,15")
    ap.add_argument("--modes", default="fixed,varying")
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = common.parse(ap, QUICK)
    torch.set_num_threads(1)
    common.run("bench_certificate_ratio", {"time": run_time, "equal": run_equal, "varying": run_varying}[a.part], a,
               part=a.part)
