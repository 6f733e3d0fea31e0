"""The varying query's gap growth on nested units: one query token, keys added (not a test).

    python -m bench.varying_growth_nested [--ns 16 64 256] [--heads 12] [--radii 0.002 0.02]
                                          [--variants paper-like tight] [--norm linf] [--part NAME] [--quick]

`bench.context_length`'s units at two n are different problems (the passage's first n tokens, the query the last
one), so the ratio of their median gaps mixes the relaxation's growth with which heads were drawn
(`bench/varying_growth_spread.py`: per-head ratios 0.09-121). Here every unit reads the same query token, the
passage's token N - 1 (N = the largest --ns), and the unit with n keys attends the n most recent tokens
N - n .. N - 1 (the causal head restricted to a window; each unit's tokens are all in the next larger one). Per head
the ratio gap(n) / gap(smallest n) is then the growth of one problem as keys are added.

Model: random-gpt2 (SYNTHETIC, init std 0.08, layer 5, `bench.context_length`'s weights and passage), varying
query, the public entry `second_order_certificate`. Reference: `best_feasible_ascent` (4 restarts x 60 steps,
seed 0); relative gap (bound - reference) / (reference - nominal). Printed per (radius, variant, n): the median
gap, the median and range of the per-head ratios, the heads whose ratio is at most 1.2, median seconds, and
soundness violations (a bound below the reference).
"""
from __future__ import annotations

import argparse
import dataclasses
import time

from bench import common
from bench.context_length import relative_gap

common.single_threaded_blas()

import numpy as np  # noqa: E402  (after the BLAS thread count is set)

QUICK = {"ns": [8, 16], "heads": 1, "radii": [0.02], "variants": ["paper-like"]}
GOAL = 1.2  # the growth the open issue asks for: gap(n) <= 1.2 x gap(16)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256], help="numbers of keys, smallest first")
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--radii", type=float, nargs="+", default=[0.002, 0.02])
    ap.add_argument("--variants", nargs="+", default=["paper-like", "tight"], choices=["paper-like", "tight"])
    ap.add_argument("--norm", default="linf", choices=["linf", "l2"])
    ap.add_argument("--part", help="a name for this result (varying_growth_nested-PART)")
    return ap


def nested_problem(full, n: int):
    """The unit `full` (query last) restricted to its n most recent tokens, the query still last."""
    return dataclasses.replace(full, Z0=full.Z0[-n:], query_index=n - 1, meta=dict(full.meta, window=n))


def unit_rows(args) -> list[dict]:
    from tqdm import tqdm

    from attncert.certify.best_feasible_ascent import best_feasible_ascent
    from attncert.certify.second_order.certificate import second_order_certificate
    from attncert.head.units import specification_vectors
    from bench import context_length as cl

    N = max(args.ns)
    arrays = cl.head_arrays(N)
    spec = specification_vectors(arrays, cl.LAYER, [N - 1], 0)
    jobs = [(h, r, n) for h in range(args.heads) for r in args.radii for n in sorted(args.ns)]
    rows = []
    for h, r, n in tqdm(jobs, desc="nested units"):
        p = nested_problem(cl.problem(arrays, spec, [N - 1], h, N, r, args.norm, "varying"), n)
        ref = best_feasible_ascent(p, restarts=4, steps=60, seed=0).value
        for variant in args.variants:
            t0 = time.perf_counter()
            bound = second_order_certificate(p, upper_cone=variant == "tight").value
            rows.append(dict(n=n, head=h, radius=r, variant=variant, entry=bound, reference=ref,
                             movement=ref - p.nominal_value(), seconds=time.perf_counter() - t0))
    return rows


def summary(rows: list[dict]) -> list[dict]:
    n0 = min(r["n"] for r in rows)
    base = {(r["head"], r["radius"], r["variant"]): relative_gap(r, "entry") for r in rows if r["n"] == n0}
    out = []
    for key in sorted({(r["radius"], r["variant"], r["n"]) for r in rows}):
        sel = [r for r in rows if (r["radius"], r["variant"], r["n"]) == key]
        gaps = np.array([relative_gap(r, "entry") for r in sel])
        ratio = np.array([relative_gap(r, "entry") / max(base[(r["head"], r["radius"], r["variant"])], 1e-300)
                          for r in sel])
        out.append(dict(radius=key[0], variant=key[1], n=key[2], units=len(sel), gap=float(np.median(gaps)),
                        ratio=float(np.median(ratio)), ratio_lo=float(ratio.min()), ratio_hi=float(ratio.max()),
                        within_goal=int(np.sum(ratio <= GOAL)), seconds=float(np.median([r["seconds"] for r in sel])),
                        violations=int(sum(r["entry"] < r["reference"] for r in sel))))
    return out


def main(args) -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    rows = unit_rows(args)
    summ = summary(rows)
    N, n0 = max(args.ns), min(args.ns)
    print(f"Model: random-gpt2 (SYNTHETIC, not GPT-2), layer 5, varying query, {args.norm}. Nested units: query = "
          f"token {N - 1} of the passage, n keys = its n most recent tokens. Relative gap = (bound - best ascent) / "
          f"(best ascent - nominal); ratio = a head's gap at n / its gap at n = {n0}.\n")
    print(f"| r | variant | n | heads | median gap | ratio median | ratio range | heads with ratio <= {GOAL} | "
          "s (median) | unsound |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for s in summ:
        print(f"| {s['radius']:g} | {s['variant']} | {s['n']} | {s['units']} | {s['gap']:.4g} | {s['ratio']:.3f} | "
              f"{s['ratio_lo']:.2f}-{s['ratio_hi']:.2f} | {s['within_goal']} | {s['seconds']:.2f} | "
              f"{s['violations']} |")
    print(f"\nViolations: {sum(s['violations'] for s in summ)} of {len(rows)} certificates.")
    return {"rows": rows, "summary": summ}


if __name__ == "__main__":
    args = common.parse(build_parser(), QUICK)
    common.run("varying_growth_nested", main, args, args.part)
