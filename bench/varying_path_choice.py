"""The varying query's path choice by n: the public entry against the cvxpy factored program, unit by unit (not a test).

    python -m bench.varying_path_choice [--ns 32 64] [--heads 6] [--norms linf l2] [--radii 1e-4 0.002 0.02]
                                        [--part NAME] [--quick]

Units: `bench.context_length`'s GPT-2-sized random heads (random-gpt2, SYNTHETIC, layer 5, the long-context passage,
query = last token), varying query, heads 0 .. --heads - 1. Each unit, both variants (paper-like, tight), goes
through the public entry `second_order_certificate` (above `certificate.VARYING_LONG_ABOVE` tokens the long path,
which solves the cvxpy programs beside it up to 64 tokens) and through the cvxpy factored program
`factored.second_order_varying_factored` forced on the same unit. Reference: `best_feasible_ascent` (4 restarts x 60
steps, seed 0, as in `bench.context_length`). Printed per (n, norm, radius, variant): units, the median relative gap
(bound - reference) / (reference - nominal) of each, the units where the entry is looser than the factored program by
more than TOL of the factored program's gap and the largest ratio entry gap / factored gap, median seconds of each,
and soundness violations (a bound below the reference). The path choice costs no tightness where no unit is looser.
"""
from __future__ import annotations

import argparse
import time

from bench import common
from bench.context_length import relative_gap

common.single_threaded_blas()

import numpy as np  # noqa: E402  (after the BLAS thread count is set)

QUICK = {"ns": [32], "heads": 1, "norms": ["l2"], "radii": [0.002]}
TOL = 1e-3  # relative: differences below this share of the factored program's gap are solver noise


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[32, 64], help="numbers of keys")
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--norms", nargs="+", default=["linf", "l2"], choices=["linf", "l2"])
    ap.add_argument("--radii", type=float, nargs="+", default=[1e-4, 0.002, 0.02])
    ap.add_argument("--part", help="a name for this result (varying_path_choice-PART)")
    return ap


def unit_rows(n: int, heads: int, norms, radii) -> list[dict]:
    """One row per (head, norm, radius, variant): both bounds, the reference, the movement, seconds."""
    from tqdm import tqdm

    from attncert.certify.best_feasible_ascent import best_feasible_ascent
    from attncert.certify.second_order.certificate import second_order_certificate
    from attncert.certify.second_order.varying_query.factored import second_order_varying_factored
    from attncert.head.reduced_geometry import reduced_geometry
    from attncert.head.units import specification_vectors
    from bench import context_length as cl

    arrays = cl.head_arrays(n)
    spec = specification_vectors(arrays, cl.LAYER, [n - 1], 0)
    rows = []
    for h, norm, r in tqdm([(h, nm, r) for nm in norms for r in radii for h in range(heads)], desc=f"{n} keys"):
        p = cl.problem(arrays, spec, [n - 1], h, n, r, norm, "varying")
        ref = best_feasible_ascent(p, restarts=4, steps=60, seed=0).value
        geo = reduced_geometry(p)
        for tight in (False, True):
            t0 = time.perf_counter()
            entry = second_order_certificate(p, upper_cone=tight)
            t1 = time.perf_counter()
            fact = second_order_varying_factored(p, geo, upper_cone=tight)
            t2 = time.perf_counter()
            rows.append(dict(n=n, head=h, norm=norm, radius=r, variant="tight" if tight else "paper-like",
                             entry=entry.value, factored=fact.value, reference=ref,
                             movement=ref - p.nominal_value(), entry_s=t1 - t0, factored_s=t2 - t1))
    return rows


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for key in sorted({(r["n"], r["norm"], r["radius"], r["variant"]) for r in rows}):
        sel = [r for r in rows if (r["n"], r["norm"], r["radius"], r["variant"]) == key]
        ge = np.array([relative_gap(r, "entry") for r in sel])
        gf = np.array([relative_gap(r, "factored") for r in sel])
        ratio = ge / np.maximum(gf, 1e-300)
        out.append(dict(n=key[0], norm=key[1], radius=key[2], variant=key[3], units=len(sel),
                        entry_gap=float(np.median(ge)), factored_gap=float(np.median(gf)),
                        looser=int(np.sum(ge > gf + TOL * np.abs(gf))), worst_ratio=float(np.max(ratio)),
                        entry_s=float(np.median([r["entry_s"] for r in sel])),
                        factored_s=float(np.median([r["factored_s"] for r in sel])),
                        violations=int(sum(min(r["entry"], r["factored"]) < r["reference"] for r in sel))))
    return out


def main(args) -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    rows = [row for n in args.ns for row in unit_rows(n, args.heads, args.norms, args.radii)]
    summ = summary(rows)
    print("Model: random-gpt2 (SYNTHETIC, not GPT-2), layer 5, varying query. Relative gap = (bound - best ascent) / "
          f"(best ascent - nominal), medians; looser: entry above the factored program by > {TOL:g} of its gap.\n")
    print("| n | norm | r | variant | units | entry gap | factored gap | looser | worst ratio | s entry / factored "
          "| unsound |")
    print("| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in summ:
        print(f"| {s['n']} | {s['norm']} | {s['radius']:g} | {s['variant']} | {s['units']} | {s['entry_gap']:.4g} | "
              f"{s['factored_gap']:.4g} | {s['looser']} | {s['worst_ratio']:.3f} | {s['entry_s']:.2f} / "
              f"{s['factored_s']:.2f} | {s['violations']} |")
    print(f"\nLooser in {sum(s['looser'] for s in summ)} of {len(rows)} pairs; "
          f"violations {sum(s['violations'] for s in summ)}.")
    return {"rows": rows, "summary": summ}


if __name__ == "__main__":
    args = common.parse(build_parser(), QUICK)
    common.run("varying_path_choice", main, args, args.part)
