"""Largest gap / secant-slack bound of the second-order certificate over many random fixed-query units.

The theorem (docs/certificate.md, section 7): gap = certificate - t* <= B(t*), the value-weighted secant
slack. Here t* is the upper end of the certified exact bracket (`exact_worst_case(...).hi`, within 1e-10 of
the value spread of the true optimum) and B = `secant_slack_bound(problem, t*)`.

Units (fixed query): random heads (`random_head_problem`, d 2-8, d_h 1-4, n 2-16, linf or l2, a random sign
of the specification) whose key and value weights are rescaled so that the largest score shift R_s and
value shift R_w hit a drawn pair: R_s = 10^U(-4, 0.5) and R_s / R_w = 10^U(-4, 4) ("regimes"); a further
fifth of the units are "regular" heads (weight scale 0.3-1.5, r = 10^U(-2.5, -0.5)), the kind of the
test suite. Units where the certificate falls back to first order (or returns the first-order bound as attained,
`second_order.attained`) are counted and left out of the ratio: their value is not the relaxation's.

Reported, per variant (default; tight = `upper_cone=True`): the number of units, fallbacks, and overall,
per band of R_s / R_w and for regular heads: the largest gap / B, the largest (gap - tol)_+ / B with
tol = TOL_ABS x (value spread) -- the solver tolerance stated for the theorem's numerical check: the
certified bound is the weak-duality bound of an interior-point dual, accurate to about 1e-10 of the
objective scale, while B can be 1e-12 of the value spread (or 1e-70, when the keys that could gain are
exponentially outweighed) -- and the number of units with gap > B + tol (must be 0); and the same with the
solve's own dual gap (certified bound - primal) subtracted: the relaxation's optimum lies between the primal and
the certified bound, so only primal - t* > B + tol is a violation of the theorem beyond the solver's accuracy.

    .venv/bin/python -m bench.bench_secant_ratio [--units 5000] [--tight] [--seed 0] [--quick]

Default: 5,000 units of the default variant (about 5-10 min on one core); --tight adds the tight variant
on the same units; --units for more.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from bench import common  # noqa: E402

from attncert.head.problem import HeadProblem, random_head_problem  # noqa: E402

TOL_ABS = 1e-9  # stated numerical tolerance of the check, in units of the value spread


def regime_unit(rng: np.random.Generator) -> tuple[HeadProblem, str]:
    """A random fixed-query unit with drawn (R_s, R_s / R_w); returns (problem, band label)."""
    d, dh, n = int(rng.integers(2, 9)), int(rng.integers(1, 5)), int(rng.integers(2, 17))
    norm = "linf" if rng.uniform() < 0.5 else "l2"
    r = 10 ** rng.uniform(-3, 0)
    seed = int(rng.integers(2 ** 31))
    if rng.uniform() < 0.2:
        p = random_head_problem(np.random.default_rng(seed), d=d, d_head=dh, n=n, radius=10 ** rng.uniform(-2.5, -0.5),
                                norm=norm, scale=float(rng.uniform(0.3, 1.5)))
        return (p if rng.uniform() < 0.5 else p.negated()), "regular"
    p = random_head_problem(np.random.default_rng(seed), d=d, d_head=dh, n=n, radius=r, norm=norm)
    log_rs, log_ratio = rng.uniform(-4, 0.5), rng.uniform(-4, 4)
    q = p.nominal_query()
    u_s = p.W_K @ q / math.sqrt(dh)
    u_w = p.W_V @ p.c
    fk = 10 ** log_rs / (r * p.dual_norm(u_s))
    fv = 10 ** (log_rs - log_ratio) / (r * p.dual_norm(u_w))
    p = HeadProblem(p.W_Q, p.W_K * fk, p.W_V * fv, p.b_Q, p.b_K * fk, p.b_V * fv, p.Z0, p.query_index,
                    p.c if rng.uniform() < 0.5 else -p.c, r, norm, "fixed")
    band = int(math.floor(log_ratio / 2.0)) * 2  # R_s/R_w in [10^band, 10^(band+2))
    return p, f"R_s/R_w 1e{band:+d}..1e{band + 2:+d}"


QUICK = {"units": 150, "tight": True}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=5000)
    ap.add_argument("--tight", action="store_true", help="also the tight variant (upper_cone=True)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--worst", type=int, default=5, help="print this many worst units per variant")
    return ap


def main(args) -> dict:
    warnings.filterwarnings("ignore")
    from attncert.certify.exact_worst_case import exact_worst_case
    from attncert.certify.secant_slack_bound import secant_slack_bound
    from attncert.certify.second_order.certificate import second_order_certificate

    variants = [("default", False)] + ([("tight", True)] if args.tight else [])
    rng = np.random.default_rng(args.seed)
    stats = {v: collections.defaultdict(list) for v, _ in variants}
    fallbacks = collections.Counter()
    attained = collections.Counter()  # of the fallbacks: first-order bound attained by a feasible value
    excess = collections.Counter()
    beyond = collections.Counter()  # gap - (certified bound - primal) > B + tol: beyond the solve's own accuracy
    worst = {v: [] for v, _ in variants}
    seconds = collections.defaultdict(list)
    t_start = time.perf_counter()
    for k in range(args.units):
        p, band = regime_unit(rng)
        ex = exact_worst_case(p)
        B = secant_slack_bound(p, ex.hi).bound
        for name, uc in variants:
            t0 = time.perf_counter()
            res = second_order_certificate(p, upper_cone=uc)
            seconds[name].append(time.perf_counter() - t0)
            if res.fallback or res.solver == "first_order_attained":  # not the relaxation's value
                fallbacks[name] += 1
                attained[name] += res.solver == "first_order_attained"
                continue
            gap = res.value - ex.hi
            tol = TOL_ABS * ex.value_spread
            ratio = gap / B if B > 0 else (math.inf if gap > 0 else 0.0)
            within = max(gap - tol, 0.0) / B if B > 0 else (math.inf if gap > tol else 0.0)
            # the relaxation's optimum lies between the solve's primal and the certified bound: beyond the solve's
            # own accuracy only the primal's excess over B is a sure violation of the theorem
            dg = res.dual_gap if math.isfinite(res.dual_gap) and res.dual_gap > 0.0 else 0.0
            sure = max(gap - tol - dg, 0.0) / B if B > 0 else (math.inf if gap - dg > tol else 0.0)
            stats[name][band].append((ratio, within, sure))
            stats[name]["all"].append((ratio, within, sure))
            if gap > B + tol:
                excess[name] += 1
            if gap - dg > B + tol:
                beyond[name] += 1
            worst[name].append((within, ratio, k, band, p.norm, p.n, gap, B, tol, res.dual_gap, res.status))
    elapsed = time.perf_counter() - t_start
    print(f"gap / secant-slack bound, fixed query, {args.units} random units (seed {args.seed}), {elapsed:.0f} s")
    print(f"tolerance of the check: gap <= B + {TOL_ABS:g} x value spread")
    result = {"units": args.units, "seed": args.seed, "tol_abs": TOL_ABS, "variants": {}}
    for name, _ in variants:
        s = stats[name]
        result["variants"][name] = {
            "fallbacks": fallbacks[name], "first_order_attained": attained[name], "gap_above_B_tol": excess[name],
            "primal_above_B_tol": beyond[name], "median_seconds": float(np.median(seconds[name])),
            "bands": {band: {"units": len(v), "max_gap_over_B": float(np.max([x[0] for x in v])),
                             "max_gap_minus_tol_over_B": float(np.max([x[1] for x in v])),
                             "max_gap_minus_tol_minus_dual_gap_over_B": float(np.max([x[2] for x in v])),
                             "median_gap_over_B": float(np.median([x[0] for x in v]))} for band, v in s.items()}}
        print(
            f"\nvariant {name}: fallbacks {fallbacks[name]} (first order attained: {attained[name]}), median "
            f"{np.median(seconds[name]):.3f} s per unit "
            f"(max {np.max(seconds[name]):.2f}); units with gap > B + tol: {excess[name]}; with primal - t* > B + tol "
            f"(beyond the solve's accuracy): {beyond[name]}"
        )
        print(
            f"  {'':24s} {'units':>5s}  {'max gap/B':>11s}  {'max (gap-tol)/B':>15s}  {'max (gap-tol-dualgap)/B':>23s}"
            f"  {'median gap/B':>12s}"
        )
        for band in sorted(s, key=lambda b: (b != "all", b)):
            a = np.array(s[band])
            print(f"  {band:24s} {a.shape[0]:5d}  {a[:, 0].max():11.4g}  {a[:, 1].max():15.4f}  {a[:, 2].max():23.4f}"
                  f"  {np.median(a[:, 0]):12.4f}")
        for row in sorted(worst[name], reverse=True)[:args.worst]:
            within, ratio, k, band, norm, n, gap, B, tol, dg, status = row
            print(f"    worst: (gap-tol)/B {within:.4f} gap/B {ratio:.4g} unit {k} {band} {norm} n={n} gap {gap:.3e} "
                  f"B {B:.3e} tol {tol:.2e} dual-primal {dg:.2e} {status}")
    return result


if __name__ == "__main__":
    common.run("bench_secant_ratio", main, common.parse(build_parser(), QUICK))
