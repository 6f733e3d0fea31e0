"""What the long-context ascent's random restarts buy: each part certified with two restart counts (not a test).

    python -m bench.long_context_restarts --npz <run>/data/long_context/all-MiniLM-L6-v2/layer_tokens.npz \
        [--lengths 16 64 128 256 512] [--heads 0 3 6 9] [--restarts 6 2]

Every (length, head) part of the default configuration's long-context stage (layer 2, query position 4, linf,
r = 0.002 and 0.02, fixed and varying query: the units of one `long_context_certify` job) is certified twice in one
process, with each `--restarts` count, the order alternating from part to part. The varying query's ascent starts
from the nominal tokens, the gradient step and the exact fixed-query maximisers of the same radii (warm starts);
a restart count above 2 adds random starts (a quarter gradient-stepped, the rest the best of a screen of random
points). Reported per part: seconds of each count, their ratio, and the largest change of a varying unit's best
ascent value between the two, relative to its movement |best - nominal| (the relative gap's own scale). The
certified numbers do not depend on the restart count; only the reference they are checked against does.

Writes long_context_restarts[-quick].md / .json (bench/common.py). One BLAS/OpenMP and torch thread.
"""
from __future__ import annotations

import argparse
import time

from bench import common

common.single_threaded_blas()
QUICK = {"lengths": [16, 64], "heads": [0]}
LAYER, QUERY_POSITION, SPEC_SEED = 2, 4, 0  # workflow/config/default.yaml long_context and spec_seed
RADII, NORMS, MODES, STEPS, SEED = [0.002, 0.02], ["linf"], ["fixed", "varying"], 100, 0


def main(args) -> dict:
    import torch

    from attncert.certify.long_context import certify_long_context, long_context_problems
    from attncert.model.extraction import load_layer

    torch.set_num_threads(1)
    arrays = load_layer(args.npz)
    a, b = args.restarts
    rows = []
    print(f"| length | head | s, {a} restarts | s, {b} restarts | ratio | largest change of a best value / movement |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for k, (T, h) in enumerate((T, h) for T in args.lengths for h in args.heads):
        problems = long_context_problems(arrays, LAYER, [T], [h], QUERY_POSITION, RADII, NORMS, SPEC_SEED, MODES)
        seconds, tables = {}, {}
        for R in ((a, b) if k % 2 == 0 else (b, a)):
            t0 = time.perf_counter()
            tables[R] = certify_long_context(problems, ascent_restarts=R, ascent_steps=STEPS, seed=SEED,
                                             tight=True)[0]
            seconds[R] = time.perf_counter() - t0
        x, y = tables[a], tables[b]
        varying = x["mode"] == "varying"
        move = (x["best_feasible"] - x["nominal"]).abs()[varying]
        change = float(((y["best_feasible"] - x["best_feasible"]).abs()[varying] / move).max())
        rows.append(dict(length=T, head=h, seconds_a=seconds[a], seconds_b=seconds[b], change=change,
                         best_a=x["best_feasible"].tolist(), best_b=y["best_feasible"].tolist()))
        print(f"| {T} | {h} | {seconds[a]:.2f} | {seconds[b]:.2f} | {seconds[b] / seconds[a]:.2f} | {change:.1e} |",
              flush=True)
    sa, sb = sum(r["seconds_a"] for r in rows), sum(r["seconds_b"] for r in rows)
    print(f"\nall parts: {sa:.1f} s with {a} restarts, {sb:.1f} s with {b} ({sb / sa:.2f}); largest change of a best "
          f"value {max(r['change'] for r in rows):.1e} of its movement")
    return {"restarts": [a, b], "rows": rows, "seconds": [sa, sb]}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npz", required=True, help="a default run's data/long_context/{model}/layer_tokens.npz")
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 128, 256, 512])
    ap.add_argument("--heads", type=int, nargs="+", default=[0, 3, 6, 9])
    ap.add_argument("--restarts", type=int, nargs=2, default=[6, 2], help="the two restart counts compared")
    return ap


if __name__ == "__main__":
    common.run("long_context_restarts", main, common.parse(build_parser(), QUICK))
