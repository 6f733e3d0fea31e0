"""How often the second-order certificate falls back to first order, by radius (not a test).

Units: random heads (`random_head_problem`) with weight scale 10^U(-1, 1) (0.1-10), d in 2..8, d_h in 1..4,
n in 2..8 attended tokens, linf or l2 (half each), both query modes, radii 1e-4 ... 3. For every unit the
second-order certificate (default variant, or --tight) is computed and classified:

    ok         a certified second-order bound (fallback False)
    attained   the first-order bound, proved attained by a feasible value within ATTAINED_TOL of the movement
               (solver "first_order_attained", fallback False: the maximum itself, no relaxation can be lower)
    fallback   the first-order certificate with a labelled reason in `status` (counted per reason)
    exception  the call raised (must never happen)
    nonfinite  the value is not finite (must never happen)
    unsound    fixed: value < the exact bracket's feasible end `lo` (a feasible value);
               varying: value < the best of a short multi-start ascent (a feasible value)

Printed: per mode and radius, the number of units, the fallback rate and the exceptions / non-finite /
unsound counts; then the fallback reasons and the median seconds per unit.

    .venv/bin/python -m bench.bench_second_order_fallback [--units 30] [--tight] [--seed 0] [--quick]

`--units` is per (mode, radius); the default (30 x 7 radii x 2 modes = 420 units) takes a few minutes on
one core. BLAS runs single-threaded.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from attncert.head.problem import random_head_problem  # noqa: E402
from bench import common  # noqa: E402

RADII = (1e-4, 1e-3, 0.01, 0.1, 0.5, 1.0, 3.0)


def random_unit(rng: np.random.Generator, radius: float, mode: str):
    scale = 10 ** rng.uniform(-1, 1)
    d, dh, n = int(rng.integers(2, 9)), int(rng.integers(1, 5)), int(rng.integers(2, 9))
    norm = "linf" if rng.uniform() < 0.5 else "l2"
    seed = int(rng.integers(2 ** 31))
    return random_head_problem(np.random.default_rng(seed), d=d, d_head=dh, n=n, radius=radius, norm=norm,
                               mode=mode, scale=scale)


def _reason(status: str) -> str:
    """The fallback reason without unit-specific numbers."""
    s = status.removeprefix("fallback: ")
    return re.sub(r"[-+]?\d[\d.e+-]*", "#", s)[:90]


def reference(problem) -> float:
    """A feasible value (lower bound of max g): the exact bracket's lo (fixed) or a short ascent (varying)."""
    if problem.mode == "fixed":
        from attncert.certify.exact_worst_case import exact_worst_case

        lo = exact_worst_case(problem).lo
        return lo if math.isfinite(lo) else problem.nominal_value()
    import torch

    from attncert.certify.best_feasible_ascent import best_feasible_ascent

    torch.set_num_threads(1)
    return best_feasible_ascent(problem, restarts=4, steps=40).value


QUICK = {"units": 3}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=30, help="units per (mode, radius)")
    ap.add_argument("--tight", action="store_true", help="the tight variant (upper exponential cone)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="fixed,varying")
    return ap


def main(args) -> dict:
    warnings.filterwarnings("ignore")
    from attncert.certify.second_order.certificate import second_order_certificate

    print(f"second-order fallback by radius; variant {'tight' if args.tight else 'default'}; "
          f"{args.units} units per (mode, radius); weight scale 0.1-10, d 2-8, d_h 1-4, n 2-8, linf/l2")
    reasons = collections.Counter()
    times = collections.defaultdict(list)
    rows = []
    for mode in args.modes.split(","):
        for r in RADII:
            rng = np.random.default_rng([args.seed, int(round(-math.log10(r) * 100)) + 1000, mode == "varying"])
            cnt = collections.Counter()
            for _ in range(args.units):
                p = random_unit(rng, r, mode)
                t0 = time.perf_counter()
                try:
                    res = second_order_certificate(p, upper_cone=args.tight)
                except Exception as exc:  # noqa: BLE001 - counted, must never happen
                    cnt["exception"] += 1
                    reasons[
                        f"{mode} r{'<=' if r <= 0.1 else '>'}0.1: EXCEPTION {type(exc).__name__}: {str(exc)[:60]}"
                    ] += 1
                    continue
                times[mode].append(time.perf_counter() - t0)
                cnt["units"] += 1
                if not math.isfinite(res.value):
                    cnt["nonfinite"] += 1
                if res.solver == "first_order_attained":
                    cnt["attained"] += 1
                    reasons[
                        f"{mode} r{'<=' if r <= 0.1 else '>'}0.1: attained, "
                        f"{_reason(res.status.split('(instead of ')[-1])}"
                    ] += 1
                if res.fallback:
                    cnt["fallback"] += 1
                    reasons[f"{mode} r{'<=' if r <= 0.1 else '>'}0.1: {_reason(res.status)}"] += 1
                try:
                    ref = reference(p)
                except Exception:  # noqa: BLE001 - the reference itself may fail at huge widths
                    ref = p.nominal_value()
                if not res.value >= ref:
                    cnt["unsound"] += 1
            cnt["units"] += 0
            rows.append((mode, r, cnt))
    print()
    print(
        f"{'mode':8s} {'radius':>7s} {'units':>6s} {'fallback':>9s} {'rate':>6s} {'attained':>8s} {'exc':>4s} "
        f"{'nonfin':>6s}"
        f" {'unsound':>7s}"
    )
    for mode, r, c in rows:
        tot = c["units"] + c["exception"]
        rate = (c["fallback"] + c["exception"]) / max(tot, 1)
        print(
            f"{mode:8s} {r:7g} {tot:6d} {c['fallback']:9d} {rate:6.1%} {c['attained']:8d} {c['exception']:4d} "
            f"{c['nonfinite']:6d}"
            f" {c['unsound']:7d}"
        )
    for mode in args.modes.split(","):
        small = [c for m, r, c in rows if m == mode and r <= 0.1]
        tot = sum(c["units"] + c["exception"] for c in small)
        bad = sum(c["fallback"] + c["exception"] for c in small)
        print(f"{mode}: fallback (or exception) at r <= 0.1: {bad}/{tot} = {bad / max(tot, 1):.1%}")
    print("\nreasons:")
    for k, v in sorted(reasons.items()):
        print(f"  {v:5d}  {k}")
    for mode, t in times.items():
        print(f"median seconds per unit ({mode}): {np.median(t):.3f} (max {np.max(t):.2f})")
    return {"variant": "tight" if args.tight else "default",
            "rows": [{"mode": m, "radius": r, **{k: int(v) for k, v in c.items()}} for m, r, c in rows],
            "reasons": dict(reasons), "median_seconds": {m: float(np.median(t)) for m, t in times.items()}}


if __name__ == "__main__":
    common.run("bench_second_order_fallback", main, common.parse(build_parser(), QUICK))
