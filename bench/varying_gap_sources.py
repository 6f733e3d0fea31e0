"""Where the varying query's gap on the default run's long-context units comes from, per length (not a test).

    python -m bench.varying_gap_sources --run <run dir> [--lengths 16 64 128 256 512] [--heads 0 3 6 9]
                                        [--radii 0.002 0.02] [--part NAME]

The default run's long-context stage reads one passage at growing lengths T (all-MiniLM-L6-v2, layer 2, query
position 4, linf; `workflow/config/default.yaml`); its varying-query gap grows with T. Each varying unit is solved
here by the long program alone (`long.BESIDE_MAX` = 0, paper-like), three ways:

* **as is**: the package's stopping rules (cutting-plane rounds while they pay, `walk_share.round_paid`), and the
  same for the tight variant (upper exponential cone);
* **rounds to convergence**: ROUND_SHARE = 0, up to ROUNDS_CAP rounds, `long.CUT_STOP` 1e-7 (the rounds' part of
  the gap: what more cuts of the same relaxation can still win; certified bounds);
* **budgets at the box value** (WHAT-IF, not a certificate): every box budget and shift-cut bound at a best-found
  box value instead of the max-cut SDP bound (`bench.varying_budget_slack.at_box_value`, a lower bound of the box
  maximum): the SDP slack's part.

Beside them the same unit's **fixed-query** gaps from the run (paper-like and tight, against the exact value): what
the relaxation leaves when the query token does not move. Relative gap = (bound - reference) / (reference -
nominal), the reference the run's best ascent (varying) or exact value (fixed), read from the run's
`data/long_context/<model>/units.csv`. Printed per (radius, length): medians over the heads and their growth over
the smallest length, and the median score half-widths: R_s (a key's own perturbation) and H (the query's shift of a
key's score, median over the keys). MiniLM is bidirectional, so the query token's layer input, and with it every
width, changes with the context: the units at two lengths are different problems.

Writes varying_gap_sources[-PART][-quick].md / .json (bench/common.py). One BLAS/OpenMP thread.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench import common

common.single_threaded_blas()

import numpy as np  # noqa: E402  (after the BLAS thread count is set: the certified bounds depend on it)

from bench.context_length import relative_gap  # noqa: E402

QUICK = {"lengths": [16, 64], "heads": [9], "radii": [0.02]}
LAYER, QUERY_POSITION, SPEC_SEED, MODEL = 2, 4, 0, "all-MiniLM-L6-v2"  # workflow/config/default.yaml
ROUNDS_CAP, CUT_STOP_CONVERGED = 30, 1e-7
METHODS = ("as_is", "as_is_tight", "converged", "box", "fixed", "fixed_tight")


def run_references(units_csv: Path) -> dict:
    """(head, length, radius, mode) -> the run's row: reference, nominal and its second-order bounds."""
    import pandas as pd

    df = pd.read_csv(units_csv)
    return {(int(r.head), int(r.length), round(float(r.radius), 9), r.mode): r for r in df.itertuples()}


def solve(problem, patches: dict, upper_cone: bool = False):
    """The long program alone with `patches` ({(module, name): value}) applied for the call: (bound, s, rounds)."""
    from attncert.head.reduced_geometry import reduced_geometry
    import attncert.certify.second_order.varying_query.long as vl

    saved = {key: getattr(*key) for key in patches}
    for (mod, name), v in patches.items():
        setattr(mod, name, v)
    try:
        t0 = time.perf_counter()
        res = vl.second_order_varying_long(problem, reduced_geometry(problem), upper_cone=upper_cone)
        return res.value, time.perf_counter() - t0, res.rounds
    finally:
        for (mod, name), v in saved.items():
            setattr(mod, name, v)


def score_widths(problem) -> tuple[float, float]:
    """(R_s, median H_j): the half-width of a key's score shift by its own perturbation and the median over the
    kept keys of the query perturbation's shift of their scores (`VaryingData`, the long program's centering)."""
    from attncert.certify.second_order.varying_query.unfactored import prepared_varying
    from attncert.head.reduced_geometry import reduced_geometry

    _, D, _ = prepared_varying(problem, reduced_geometry(problem), "key", "varying_long")
    return float(D.R_s), float(np.median(D.H[:D.n - 1]))


def main(args) -> dict:
    import attncert.certify.second_order.varying_query.long as vl
    import attncert.certify.second_order.varying_query.long_program as LP
    import attncert.certify.second_order.varying_query.shift_moment as SM
    import attncert.certify.second_order.varying_query.walk_share as ws
    from attncert.certify.long_context import long_context_problems
    from attncert.model.extraction import load_layer
    from bench.varying_budget_slack import at_box_value

    base = args.run / "data" / "long_context" / MODEL
    if not (base / "units.csv").is_file():
        raise SystemExit(f"no finished default run at {args.run} (missing {base / 'units.csv'}): run "
                         "`snakemake --cores all` there, or pass --run DIR")
    arrays, refs = load_layer(base / "layer_tokens.npz"), run_references(base / "units.csv")
    converged = {(vl, "BESIDE_MAX"): 0, (vl, "MAX_ROUNDS"): ROUNDS_CAP, (ws, "MAX_ROUNDS"): ROUNDS_CAP,
                 (ws, "ROUND_SHARE"): 0.0, (vl, "CUT_STOP"): CUT_STOP_CONVERGED}
    rows = []
    for p in long_context_problems(arrays, LAYER, args.lengths, args.heads, QUERY_POSITION, args.radii, ["linf"],
                                   SPEC_SEED, ["varying"]):
        key = (p.meta["head"], p.meta["length"], round(p.radius, 9))
        ref, fixed = refs[key + ("varying",)], refs[key + ("fixed",)]
        row = dict(head=key[0], length=key[1], radius=p.radius, reference=ref.best_feasible,
                   movement=ref.best_feasible - ref.nominal)
        row["as_is"], row["s_as_is"], row["rounds_as_is"] = solve(p, {(vl, "BESIDE_MAX"): 0})
        row["as_is_tight"] = solve(p, {(vl, "BESIDE_MAX"): 0}, upper_cone=True)[0]
        row["converged"], row["s_converged"], row["rounds_converged"] = solve(p, converged)
        slack = []
        budget, cut = at_box_value(LP, SM, slack)
        try:
            row["box"] = solve(p, {(vl, "BESIDE_MAX"): 0})[0]
        finally:
            LP.all_keys_budget, SM.cut_bound = budget, cut
        row["R_s"], row["H"] = score_widths(p)
        fixed_move = fixed.best_feasible - fixed.nominal
        row["fixed_gap"] = (fixed.second_order - fixed.best_feasible) / fixed_move
        row["fixed_tight_gap"] = (fixed.second_order_tight - fixed.best_feasible) / fixed_move
        rows.append(row)
        print(f"head {key[0]} T {key[1]} r {p.radius:g}: " + ", ".join(f"{m} {gap(row, m):.4g}" for m in METHODS)
              + f" ({row['s_as_is']:.1f} s / {row['s_converged']:.1f} s in {row['rounds_converged']} rounds)",
              flush=True)
    print(f"\nModel: {MODEL} (the default run's long-context units: layer {LAYER}, query position {QUERY_POSITION}, "
          f"linf), heads {', '.join(map(str, args.heads))}; median relative gap (growth over T = "
          f"{args.lengths[0]}). Varying query: the long program alone, paper-like; fixed query: the run's.\n")
    print("| r | T | varying, as is | as is, tight | rounds to convergence | budgets at the box value (what-if) "
          "| fixed, paper-like | fixed, tight | R_s / H | s as is / converged |")
    print("| ---: | ---: | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rad in args.radii:
        first = None
        for T in args.lengths:
            sel = [r for r in rows if r["length"] == T and r["radius"] == rad]
            med = [statistics.median(gap(r, m) for r in sel) for m in METHODS]
            first = first or med
            cells = " | ".join(f"{v:.3g} ({v / f:.2f})" if f > 0 else f"{v:.3g}" for v, f in zip(med, first))
            secs = [statistics.median(r[f"s_{m}"] for r in sel) for m in ("as_is", "converged")]
            widths = [statistics.median(r[k] for r in sel) for k in ("R_s", "H")]
            print(f"| {rad:g} | {T} | {cells} | {widths[0]:.3g} / {widths[1]:.3g} | {secs[0]:.1f} / {secs[1]:.1f} |")
    violations = sum(r[m] < r["reference"] for r in rows for m in ("as_is", "as_is_tight", "converged"))
    print(f"\nCertificates (as is, tight, converged) below the reference: {violations}")
    return {"rows": rows}


def gap(row: dict, method: str) -> float:
    """A row's relative gap of one method (the fixed query's as read from the run)."""
    return row[f"{method}_gap"] if method.startswith("fixed") else relative_gap(row, method)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=common.REPO, help="a finished default run (default: this checkout)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 128, 256, 512])
    ap.add_argument("--heads", type=int, nargs="+", default=[0, 3, 6, 9])
    ap.add_argument("--radii", type=float, nargs="+", default=[0.002, 0.02])
    ap.add_argument("--part", default=None, help="suffix of the result's name")
    return ap


if __name__ == "__main__":
    a = common.parse(build_parser(), QUICK)
    common.run("varying_gap_sources", main, a, a.part)
