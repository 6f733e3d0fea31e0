"""The long-context fixed-query path against the monolithic program, regime by regime (a benchmark, not a test).

Units: the GPT-2-sized random heads of `bench/bench_second_order.py` (d = 768, d_head = 64, query = last token),
with the number of keys n, the norm, the weight standard deviation and the radius of each regime; the radius
is set either directly or so that the score half-width R_s = r ||u_s||_* takes a given value. Senses alternate
with the seed (even: max g, odd: min g). Regimes:

* `dominant-linf`: n = 128, linf, weight std 0.5, r = 1e-4 (one token carries almost all the softmax weight);
* `dominant-l2`: the same kind at n = 256, l2;
* `Rs-1e-3..3e-3`: n = 64, linf, std 0.14, R_s in {1.05e-3, 1.5e-3, 2e-3, 3e-3} (just above the deviation form);
* `Rs=7`, `Rs=9`: n = 64, linf, std 0.14 (weight bands e^14, e^18);
* `Rs-1e-6..1e-8`, `Rs=2e-9`: n = 64, linf, std 0.14 (near-degenerate half-widths).

Each unit goes through both paths, both variants (paper-like and tight), with
`second_order.certificate.fixed_query_certificate` and the path forced: the long-context path `separable` (what
`second_order_certificate` runs above 48 keys; the token family when more than 48 tokens are kept, else one
token-program solve) and the monolithic program `monolithic` (the path at n <= 48) on the same unit. The tight
variant's time excludes the paper-like solve it reuses. Reference: the upper end
of the exact worst case's certified bracket. Reported per regime and variant: the gap of each path relative to
the first-order certificate's gap (median), the gap ratio long / monolithic (median and worst; gaps below the
exact bracket's width count as that width), fallbacks of each path, fallbacks of the long-context path where
the monolithic one certifies, and the number of units whose tight bound lies above the same path's
paper-like bound. A bound below the reference is a soundness violation, counted and printed.

`--cost`: instead, the cost of the long-context path against n on the construction of `bench/bench_second_order.py`
(seed 7, linf, r = 0.002, weight std 0.14): n = 64 and n = 1024 (or `--cost-ns`) certified alternately `--reps`
times in one run, both variants; median seconds, their ratio to the first n, and the gap relative to the
first-order gap.

    .venv/bin/python -m bench.long_context_regimes [--quick] [--seeds 6] [--regimes NAME ...] [--part NAME]
    .venv/bin/python -m bench.long_context_regimes --cost [--reps 3] [--cost-ns 64 1024] --part cost

Writes long_context_regimes[-PART][-quick].md / .json (bench/common.py).
"""
from __future__ import annotations

from bench import common

common.single_threaded_blas()

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from dataclasses import replace  # noqa: E402

import numpy as np  # noqa: E402

REGIMES = {  # name: (n, norm, weight std, ("r", radii) or ("Rs", half-widths))
    "dominant-linf": (128, "linf", 0.5, ("r", [1e-4])),
    "dominant-l2": (256, "l2", 0.5, ("r", [1e-4])),
    "Rs-1e-3..3e-3": (64, "linf", 0.14, ("Rs", [1.05e-3, 1.5e-3, 2e-3, 3e-3])),
    "Rs=7": (64, "linf", 0.14, ("Rs", [7.0])),
    "Rs=9": (64, "linf", 0.14, ("Rs", [9.0])),
    "Rs-1e-6..1e-8": (64, "linf", 0.14, ("Rs", [1e-6, 1e-7, 1e-8])),
    "Rs=2e-9": (64, "linf", 0.14, ("Rs", [2e-9])),
}
QUICK = dict(seeds=2, regimes=["dominant-linf", "Rs=7", "Rs-1e-6..1e-8"], reps=1)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=6, help="random heads per regime (each at every radius listed)")
    ap.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    ap.add_argument("--part", default="", help="suffix of the result's name (e.g. before / after)")
    ap.add_argument("--cost", action="store_true", help="measure the cost against n instead (see the docstring)")
    ap.add_argument("--cost-ns", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--reps", type=int, default=3, help="--cost: alternating repetitions")
    return ap


def cost(args) -> dict:
    """Seconds and relative gap of the long-context path at each n, the n certified alternately."""
    from attncert.certify.exact_worst_case import exact_worst_case
    from attncert.certify.first_order_certificate import first_order_certificate
    from attncert.certify.second_order.certificate import fixed_query_certificate
    from bench.bench_second_order import gpt2_like_head

    rows = {n: {"paper": [], "tight": []} for n in args.cost_ns}
    rel = {}
    for _ in range(args.reps):
        for n in args.cost_ns:
            for variant, tight in (("paper", False), ("tight", True)):
                p = gpt2_like_head(7, 0.002, n=n)  # a new object: nothing reused between calls
                t0 = time.perf_counter()
                res = fixed_query_certificate(p, tight, path="separable")
                rows[n][variant].append(time.perf_counter() - t0)
                if (n, variant) not in rel:
                    ex, fo = exact_worst_case(p), first_order_certificate(p)
                    rel[(n, variant)] = (res.value - ex.hi) / (fo - ex.hi)
    n0 = args.cost_ns[0]
    print("| n | variant | median seconds | ratio to n = %d | gap / first-order gap |" % n0)
    print("| ---: | --- | ---: | ---: | ---: |")
    out = []
    for n in args.cost_ns:
        for variant in ("paper", "tight"):
            med = float(np.median(rows[n][variant]))
            ratio = med / float(np.median(rows[n0][variant]))
            print(f"| {n} | {variant} | {med:.3f} | {ratio:.2f} | {rel[(n, variant)]:.4g} |")
            out.append(dict(n=n, variant=variant, seconds=rows[n][variant], median=med, ratio=ratio,
                            rel_gap=rel[(n, variant)]))
    print("\nThe tight variant's time includes the paper-like solve it takes the minimum with.")
    return {"cost": out}


def unit(seed: int, n: int, norm: str, std: float, kind: str, value: float):
    """The regime's head at seed, sense max (even seed) or min (odd seed, as max of the negated problem)."""
    from attncert.head.reduced_geometry import reduced_geometry
    from bench.bench_second_order import gpt2_like_head

    p = gpt2_like_head(seed, 1.0, n=n, weight_std=std)
    p = replace(p, norm=norm)
    if kind == "Rs":
        p = replace(p, radius=value / reduced_geometry(p).R_s)
    else:
        p = replace(p, radius=value)
    return p.negated() if seed % 2 else p


def measure(problem) -> dict:
    from attncert.certify.exact_worst_case import exact_worst_case
    from attncert.certify.first_order_certificate import first_order_certificate
    from attncert.certify.second_order.certificate import fixed_query_certificate
    from attncert.certify.second_order.fixed_query.monolithic import prepared_data
    from attncert.head.reduced_geometry import reduced_geometry

    ex = exact_worst_case(problem)
    fo = first_order_certificate(problem)
    floor = max(ex.hi - ex.lo, 1e-12 * (1.0 + abs(ex.hi)))
    fo_gap = max(fo - ex.hi, floor)
    _, D, _ = prepared_data(problem, reduced_geometry(problem), time.perf_counter())
    row = dict(R_s=float(reduced_geometry(problem).R_s), radius=problem.radius, kept=int(D.A.size), fo_gap=fo_gap,
               exact_hi=ex.hi, floor=floor)
    for path, forced in (("long", "separable"), ("mono", "fixed")):
        for variant, tight in (("paper", False), ("tight", True)):
            t0 = time.perf_counter()
            res = fixed_query_certificate(problem, tight, path=forced)
            sec = time.perf_counter() - t0
            row[f"{path}_{variant}"] = dict(value=res.value, gap=res.value - ex.hi, rel=(res.value - ex.hi) / fo_gap,
                                            fallback=bool(res.fallback), seconds=sec, status=res.status,
                                            sound=bool(res.value >= ex.hi - 1e-9 * (1.0 + ex.value_spread)))
    return row


def summarize(name: str, rows: list) -> list:
    out = []
    for variant in ("paper", "tight"):
        L = [r[f"long_{variant}"] for r in rows]
        M = [r[f"mono_{variant}"] for r in rows]
        ratio = [max(a["gap"], r["floor"]) / max(b["gap"], r["floor"]) for a, b, r in zip(L, M, rows)
                 if not b["fallback"]]
        out.append(dict(
            regime=name, variant=variant, units=len(rows),
            kept=int(np.median([r["kept"] for r in rows])) if rows else 0,
            R_s=(min(r["R_s"] for r in rows), max(r["R_s"] for r in rows)),
            long_rel=float(np.median([a["rel"] for a in L])), mono_rel=float(np.median([b["rel"] for b in M])),
            ratio_median=float(np.median(ratio)) if ratio else math.nan,
            ratio_worst=float(np.max(ratio)) if ratio else math.nan,
            long_fallbacks=sum(a["fallback"] for a in L), mono_fallbacks=sum(b["fallback"] for b in M),
            long_fallback_where_mono_certifies=sum(a["fallback"] and not b["fallback"] for a, b in zip(L, M)),
            long_seconds=float(np.median([a["seconds"] for a in L])),
            mono_seconds=float(np.median([b["seconds"] for b in M])),
            unsound=sum(not a["sound"] for a in L) + sum(not b["sound"] for b in M),
        ))
    return out


def tight_above_paper(rows: list, path: str) -> int:
    """Units whose tight bound exceeds the same path's paper-like bound (both not fallbacks or either)."""
    return sum(r[f"{path}_tight"]["value"] > r[f"{path}_paper"]["value"] for r in rows)


def main(args) -> dict:
    warnings.filterwarnings("ignore")
    if args.cost:
        return cost(args)
    table, units = [], {}
    for name in args.regimes:
        n, norm, std, (kind, values) = REGIMES[name]
        rows = []
        for value in values:
            for seed in range(args.seeds):
                rows.append(dict(seed=seed, **measure(unit(seed, n, norm, std, kind, value))))
        units[name] = rows
        table += summarize(name, rows)
    print("Gap = bound - exact worst case (upper end of its certified bracket), relative to the first-order gap; "
          "ratio = long-context gap / monolithic gap per unit (units where the monolithic program certifies).\n")
    print(
        "| regime | variant | units | kept keys (median) | R_s | long gap / FO gap (median) | monolithic gap / FO gap "
        "(median) | ratio median | ratio worst | fallbacks long / mono | long falls back where mono certifies | "
        "seconds long / mono (median) | unsound |"
    )
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for t in table:
        print(f"| {t['regime']} | {t['variant']} | {t['units']} | {t['kept']} | {t['R_s'][0]:.3g}–{t['R_s'][1]:.3g} | "
              f"{t['long_rel']:.4g} | {t['mono_rel']:.4g} | {t['ratio_median']:.3g} | {t['ratio_worst']:.3g} | "
              f"{t['long_fallbacks']} / {t['mono_fallbacks']} | {t['long_fallback_where_mono_certifies']} | "
              f"{t['long_seconds']:.2f} / {t['mono_seconds']:.2f} | {t['unsound']} |")
    all_rows = [r for rows in units.values() for r in rows]
    counts = {path: tight_above_paper(all_rows, path) for path in ("long", "mono")}
    print(f"\nTight bound above the same path's paper-like bound: long-context {counts['long']} of {len(all_rows)}, "
          f"monolithic {counts['mono']} of {len(all_rows)} units.")
    violations = sum(t["unsound"] for t in table)
    if violations:
        print(f"\nSOUNDNESS VIOLATIONS: {violations}")
    return {"table": table, "tight_above_paper": counts, "units": units}


if __name__ == "__main__":
    _args = common.parse(build_parser(), QUICK)
    common.run("long_context_regimes", main, _args, part=_args.part)
