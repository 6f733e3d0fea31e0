"""Profile the `long_context_certify` job (workflow/scripts/long_context_certify.py) outside Snakemake.

    python -m bench.profile_long_context \
        --npz data/long_context/all-MiniLM-L6-v2/layer_tokens.npz --lengths 512 --modes varying --heads 0 \
        --tag before --csv lc_before.csv

Builds the units with the rule's params (workflow/config/default.yaml: long_context, certify.ascent_*, seeds),
restricted to the given lengths / modes / heads, certifies them with `certify_long_context` under cProfile, and
writes the top 30 functions by cumulative and by own time, and the per-unit seconds of each part, to
bench/results/profiles/long_context_certify-{tag}[-quick].txt (with this command line); --csv keeps the rows for a
before/after comparison. The machine may be loaded: absolute seconds are noisy, shares within one profile are not.
The summary is also written to `profile_long_context[-quick].md` / `.json` (bench/common.py; --quick: length 64,
head 0). One BLAS/OpenMP thread and one torch thread, as the rule.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

from bench import common

common.single_threaded_blas()

REPO = common.REPO
QUICK = {"lengths": "64", "heads": "0"}


def problems_of(args):
    import yaml

    from attncert.certify.long_context import long_context_problems
    from attncert.model.extraction import load_layer

    cfg = yaml.safe_load(open(args.config))
    lc = cfg["long_context"]
    pick = lambda s, default: [type(default[0])(x) for x in s.split(",")] if s else default  # noqa: E731
    problems = long_context_problems(load_layer(args.npz), int(lc["layer"]), pick(args.lengths, lc["lengths"]),
                                     pick(args.heads, lc["heads"]), lc["query_position"], lc["radii"], lc["norms"],
                                     int(cfg["spec_seed"]), pick(args.modes, lc["modes"]))
    kw = dict(ascent_restarts=cfg["certify"]["ascent_restarts"], ascent_steps=cfg["certify"]["ascent_steps"],
              seed=cfg["certify"]["seed"], tight=lc["tight"])
    return problems, kw


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npz", required=True, help="the job's input, data/long_context/{model}/layer_tokens.npz")
    ap.add_argument("--config", default=str(REPO / "workflow/config/default.yaml"))
    ap.add_argument("--lengths", default="", help="comma-separated subset (default: the config's)")
    ap.add_argument("--modes", default="")
    ap.add_argument("--heads", default="")
    ap.add_argument("--tag", default="before")
    ap.add_argument("--csv", default="", help="also write the rows here")
    ap.add_argument("--out", default=str(REPO / "bench/results/profiles"))
    return ap


def main(args) -> dict:

    import torch
    torch.set_num_threads(1)  # the rule's threads: 1
    from attncert.certify.long_context import certify_long_context

    problems, kw = problems_of(args)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    df, _entries, _pool = certify_long_context(problems, **kw)
    prof.disable()
    wall = time.perf_counter() - t0
    if args.csv:
        df.to_csv(args.csv, index=False, float_format="%.17g")
    parts = ["t_first_s", "t_exact_s", "t_ascent_s", "t_second_s", "t_second_tight_s"]
    lines = [f"command: {' '.join(sys.argv)}",
             f"{len(problems)} units, {wall:.1f} s wall under cProfile (machine shared: noisy)",
             "seconds per part (sum over the units, by length and mode):",
             df.groupby(["length", "mode"])[parts].sum().round(3).to_string()]
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(30)
        lines += [f"\n=== top 30 by {key} ===", s.getvalue()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{common.result_name(f'long_context_certify-{args.tag}', args)}.txt"
    path.write_text("\n".join(lines))
    print("\n".join(lines[:4]))
    print(f"written {path}")
    return {"units": len(problems), "wall_seconds": wall, "profile": path,
            "seconds_per_part": {f"{n} {m}": v for (n, m), v in
                                 df.groupby(["length", "mode"])[parts].sum().to_dict("index").items()}}


if __name__ == "__main__":
    common.run("profile_long_context", main, common.parse(build_parser(), QUICK))
