"""What the box budgets' max-cut slack costs the long varying program, per length (not a test).

    python -m bench.varying_budget_slack [--ns 16 64 256] [--heads 6] [--radii 0.002 0.02]

On the box (linf) the long varying program bounds the query factor's second moments by budgets
`sum_{j in S} Q_j <= Lambda_S tau^2` and by the moment cuts of the query's shift (`shift_moment`), whose right
sides are upper bounds on a convex quadratic ||B x||^2 over the unit box: the dual of the max-cut SDP
(`box_scaling`), within pi/2 of the box maximum. This diagnostic solves `bench.context_length`'s units (GPT-2-sized
`random-gpt2` heads, linf, varying query, paper-like, the long program alone: `long.BESIDE_MAX` = 0) twice: as is,
and with every such bound replaced by the best of 32 sign-iteration starts x <- sign(B^T B x) (a LOWER bound of the
box maximum, plus the same row-error terms). The second is a WHAT-IF: a relaxation that is not proved sound, whose
numbers are never certificates; it shows how much of the gap, and of its growth with n, the SDP's slack makes.
Reference: `best_feasible_ascent` (4 restarts x 60 steps, seed 0), as in `bench.context_length`. Printed per
(radius, n): the median relative gap (bound - reference) / (reference - nominal) of both, its growth over the
smallest n, and the range of SDP bound / box value over the unit's budgets and cuts.

Writes varying_budget_slack[-quick].md / .json (bench/common.py). One BLAS/OpenMP thread.
"""
from __future__ import annotations

import argparse
import statistics

from bench import common

common.single_threaded_blas()

import numpy as np  # noqa: E402  (after the BLAS thread count is set)

QUICK = {"ns": [16, 32], "heads": 1, "radii": [0.02]}


def box_value(B: np.ndarray, starts: int = 32, sweeps: int = 60) -> float:
    """max ||B x||^2 over x in {-1, 1}^d found by sign iterations from random starts: a lower bound."""
    rng = np.random.default_rng(0)
    G, best = B.T @ B, 0.0
    for _ in range(starts):
        x = np.sign(rng.standard_normal(B.shape[1]))
        for _ in range(sweeps):
            y = np.sign(G @ x)
            y[y == 0] = 1.0
            if np.array_equal(y, x):
                break
            x = y
        best = max(best, float(x @ G @ x))
    return best


def at_box_value(LP, SM, slack: list):
    """Patch `long_program.all_keys_budget` and `shift_moment.cut_bound` to min(SDP bound, box value); returns the
    originals. slack collects SDP bound / box value."""
    budget, cut = LP.all_keys_budget, SM.cut_bound

    def all_keys_budget(Vt, norm, err):
        sdp = budget(Vt, norm, err)
        low = box_value(Vt) + 3.0 * float(np.sum(err))
        slack.append(sdp / low)
        return min(sdp, low)

    def cut_bound(B, norm, row_err):
        sdp = cut(B, norm, row_err)
        root = np.sqrt(box_value(np.asarray(B))) + float(np.sqrt(np.sum(np.square(row_err))))
        slack.append(sdp / root**2)
        return min(sdp, root**2)

    LP.all_keys_budget, SM.cut_bound = all_keys_budget, cut_bound
    return budget, cut


def main(args) -> dict:
    import attncert.certify.second_order.varying_query.long as vl
    import attncert.certify.second_order.varying_query.long_program as LP
    import attncert.certify.second_order.varying_query.shift_moment as SM
    from attncert.certify.best_feasible_ascent import best_feasible_ascent
    from attncert.head.reduced_geometry import reduced_geometry
    from attncert.head.units import specification_vectors
    from bench import context_length as cl

    rows, beside = [], vl.BESIDE_MAX
    vl.BESIDE_MAX = 0
    try:
        for n in args.ns:
            arrays = cl.head_arrays(n)
            spec = specification_vectors(arrays, cl.LAYER, [n - 1], 0)
            for h in range(args.heads):
                for rad in args.radii:
                    p = cl.problem(arrays, spec, [n - 1], h, n, rad, "linf", "varying")
                    ref = best_feasible_ascent(p, restarts=4, steps=60, seed=0).value
                    row = dict(n=n, head=h, radius=rad, reference=ref, movement=ref - p.nominal_value())
                    row["sdp"] = vl.second_order_varying_long(p, reduced_geometry(p)).value
                    slack = []
                    budget, cut = at_box_value(LP, SM, slack)
                    try:
                        row["box"] = vl.second_order_varying_long(p, reduced_geometry(p)).value
                    finally:
                        LP.all_keys_budget, SM.cut_bound = budget, cut
                    row["slack"] = (min(slack), max(slack)) if slack else (float("nan"),) * 2
                    rows.append(row)
                    print(f"n {n} head {h} r {rad}: relative gap {cl.relative_gap(row, 'sdp'):.5f} as is, "
                          f"{cl.relative_gap(row, 'box'):.5f} at the box value (what-if)", flush=True)
    finally:
        vl.BESIDE_MAX = beside
    print(f"\nModel: random-gpt2 (SYNTHETIC, not GPT-2), layer {cl.LAYER}, varying query, linf, paper-like, the long "
          f"program alone; heads 0-{args.heads - 1}; median relative gap (growth over n = {args.ns[0]})\n")
    print("| r | n | as is (SDP bounds) | at the box value (what-if) | SDP bound / box value |")
    print("| ---: | ---: | --- | --- | --- |")
    for rad in args.radii:
        first = None
        for n in args.ns:
            sel = [r for r in rows if r["n"] == n and r["radius"] == rad]
            med = [statistics.median(cl.relative_gap(r, m) for r in sel) for m in ("sdp", "box")]
            first = first or med
            lo, hi = min(r["slack"][0] for r in sel), max(r["slack"][1] for r in sel)
            print(f"| {rad:g} | {n} | {med[0]:.5f} ({med[0] / first[0]:.2f}) | {med[1]:.5f} ({med[1] / first[1]:.2f}) "
                  f"| {lo:.3f}-{hi:.3f} |")
    violations = sum(r["sdp"] < r["reference"] for r in rows)
    print(f"\nCertificates (as is) below the reference: {violations}")
    return {"rows": rows}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--radii", type=float, nargs="+", default=[0.002, 0.02])
    return ap


if __name__ == "__main__":
    common.run("varying_budget_slack", main, common.parse(build_parser(), QUICK))
