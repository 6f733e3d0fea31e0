"""Interior-point solves of the varying query's long path: how many, how long, how far each gets (not a test).

    python -m bench.long_path_solves [--ns 64 256 1024] [--heads 1] [--norms l2 linf] [--radii 0.02]
                                     [--settings '{"static_regularization_constant": 1e-10}'] [--quick]

Units: `bench.context_length`'s GPT-2-sized random heads (random-gpt2, layer 5, the long-context passage), varying
query. Each unit's paper-like and tight certificates run through `second_order_varying_long` with its own solver
ladder (`--settings`: Clarabel settings laid over every rung, to compare settings side by side); every Clarabel
call is recorded (status, interior-point iterations, seconds, rows and nonzeros of its program) together with the
range of the magnitudes of its constraint matrix, which the token scaling spreads. Printed per (n, norm): the
median solves per certificate, iterations per solve, milliseconds per iteration, and the share of solves that end
at "insufficient progress" or a numerical error. Cost per solve grows as (iterations) x (rows, ~linear in n); what
drives the long path's cost at n = 1024 is read off here.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from bench import common

common.single_threaded_blas()

import numpy as np  # noqa: E402  (after the BLAS thread count is set)

QUICK = {"ns": [32, 64], "norms": ["l2"], "radii": [0.02]}
FAILED = ("InsufficientProgress", "NumericalError")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[64, 256, 1024], help="numbers of keys")
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--norms", nargs="+", default=["l2", "linf"], choices=["l2", "linf"])
    ap.add_argument("--radii", type=float, nargs="+", default=[0.02])
    ap.add_argument("--settings", default="{}", help="Clarabel settings (JSON) laid over every rung of the ladder")
    return ap


def recording_clarabel(calls: list):
    """`token_solve._clarabel` wrapped: every call appends (status, iterations, seconds, rows, nnz, |A| min, max)."""
    from attncert.certify.second_order.fixed_query import token_solve

    solve = token_solve._clarabel

    def recorded(prog, opts, stop=None):
        t0 = time.perf_counter()
        raw = solve(prog, opts, stop)
        mag = np.abs(prog.A.data[prog.A.data != 0])
        calls.append((str(raw.status), int(raw.iterations), time.perf_counter() - t0, int(prog.A.shape[0]),
                      int(prog.A.nnz), float(mag.min()), float(mag.max())))
        return raw

    token_solve._clarabel = recorded


def main(args) -> dict:
    from attncert.certify.second_order.varying_query.long import LONG_LADDER, second_order_varying_long
    from attncert.head.reduced_geometry import reduced_geometry
    from attncert.head.units import specification_vectors
    from bench.context_length import LAYER, head_arrays, problem

    overlay = json.loads(args.settings)
    ladder = tuple(dict(rung, **overlay) for rung in LONG_LADDER)
    calls: list = []
    recording_clarabel(calls)
    arrays = head_arrays(max(args.ns))
    qps = [n - 1 for n in args.ns]
    spec = specification_vectors(arrays, LAYER, qps, 0)
    units = []
    for n in args.ns:
        for h in range(args.heads):
            for norm in args.norms:
                for r in args.radii:
                    p = problem(arrays, spec, qps, h, n, r, norm, "varying")
                    for tight in (False, True):
                        calls.clear()
                        t0 = time.perf_counter()
                        res = second_order_varying_long(p, reduced_geometry(p), upper_cone=tight, ladder=ladder)
                        units.append(dict(n=n, head=h, norm=norm, radius=r, tight=tight, value=res.value,
                                          seconds=time.perf_counter() - t0, status=res.status, calls=list(calls)))
    print(f"Clarabel settings over the ladder: {overlay or 'none (the ladder as it is)'}\n")
    print("| n | norm | certificates | solves per certificate | iterations per solve | ms per iteration "
          "| failed solves | seconds per certificate | rows | abs(A) min / max |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    rows = []
    for n in args.ns:
        for norm in args.norms:
            sub = [u for u in units if u["n"] == n and u["norm"] == norm]
            cs = [c for u in sub for c in u["calls"]]
            if not cs:
                continue
            row = dict(n=n, norm=norm, certificates=len(sub),
                       solves=statistics.median(len(u["calls"]) for u in sub),
                       iterations=statistics.median(c[1] for c in cs),
                       ms_per_iteration=1e3 * statistics.median(c[2] / max(c[1], 1) for c in cs),
                       failed=sum(c[0] in FAILED for c in cs) / len(cs),
                       seconds=statistics.median(u["seconds"] for u in sub), rows=statistics.median(c[3] for c in cs),
                       abs_min=min(c[5] for c in cs), abs_max=max(c[6] for c in cs))
            rows.append(row)
            print(f"| {n} | {norm} | {row['certificates']} | {row['solves']:g} | {row['iterations']:g} "
                  f"| {row['ms_per_iteration']:.1f} | {row['failed']:.0%} | {row['seconds']:.2f} | {row['rows']:g} "
                  f"| {row['abs_min']:.1e} / {row['abs_max']:.1e} |")
    return {"settings": overlay, "summary": rows, "units": units}


if __name__ == "__main__":
    common.run("long_path_solves", main, common.parse(build_parser(), QUICK))
