"""The long-context job's varying-query ascent, side by side in one process: a git revision's
`attncert.certify.best_feasible_ascent` against the working tree's, on the same units (alternating which runs first).

    python -m bench.profile_long_context_ascent \
        --npz data/long_context/all-MiniLM-L6-v2/layer_tokens.npz --rev 625fadc --lengths 256,512

Each unit is run as `certify.run.certify_unit` runs it (the config's restarts and steps, the early stop, warm-started
from the exact fixed-query maximiser). Printed per unit: process CPU seconds of each (the machine may be shared:
the ratio is the measure) and the change of the best value relative to the unit's movement (best - nominal); written
to bench/results/profiles/long_context_ascent-{tag}[-quick].txt, and with the totals to
`profile_long_context_ascent[-quick].md` / `.json` (bench/common.py; --quick: length 64, head 0). One BLAS/OpenMP
thread and one torch thread, as the rule.
"""
from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import time
import types
from pathlib import Path

from bench import common

common.single_threaded_blas()

REPO = common.REPO
QUICK = {"lengths": "64", "heads": "0"}
MODULE = "src/attncert/certify/best_feasible_ascent.py"


def module_at(rev: str):
    """The ascent module as it is at git revision `rev`."""
    text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{MODULE}"], check=True, capture_output=True,
                          text=True).stdout
    mod = sys.modules["ascent_at_rev"] = types.ModuleType("ascent_at_rev")  # dataclasses look their module up
    exec(compile(text, f"{rev}:{MODULE}", "exec"), mod.__dict__)
    return mod


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npz", required=True, help="data/long_context/{model}/layer_tokens.npz of a run")
    ap.add_argument("--rev", required=True, help="the git revision to compare against")
    ap.add_argument("--lengths", default="256,512")
    ap.add_argument("--heads", default="0,9")
    ap.add_argument("--config", default=str(REPO / "workflow/config/default.yaml"))
    ap.add_argument("--tag", default="side_by_side")
    ap.add_argument("--out", default=str(REPO / "bench/results/profiles"))
    return ap


def main(args) -> dict:

    import torch
    import yaml

    from attncert.certify import best_feasible_ascent as new
    from attncert.certify.exact_worst_case import exact_worst_case
    from attncert.certify.long_context import long_context_problems
    from attncert.certify.run import ASCENT_PATIENCE, ASCENT_STOP_TOL
    from attncert.model.extraction import load_layer

    torch.set_num_threads(1)
    old = module_at(args.rev)
    cfg = yaml.safe_load(open(args.config))
    lc = cfg["long_context"]
    problems = long_context_problems(load_layer(args.npz), int(lc["layer"]), [int(x) for x in args.lengths.split(",")],
                                     [int(x) for x in args.heads.split(",")], lc["query_position"], lc["radii"],
                                     lc["norms"], int(cfg["spec_seed"]), ["varying"])
    kw = dict(restarts=cfg["certify"]["ascent_restarts"], steps=cfg["certify"]["ascent_steps"],
              seed=cfg["certify"]["seed"], sense="max", stop_tol=ASCENT_STOP_TOL, patience=ASCENT_PATIENCE)
    lines = [f"command: {' '.join(sys.argv)}", f"{args.rev} (old) against the working tree (new); process CPU s"]
    total = {"old": 0.0, "new": 0.0}
    units = []
    for i, p in enumerate(problems):
        warm = exact_worst_case(dataclasses.replace(p, mode="fixed"), sense="max")
        starts = (warm.witness - p.Z0)[None]
        secs, res = {}, {}
        for name, mod in ((("old", old), ("new", new)) if i % 2 == 0 else (("new", new), ("old", old))):
            t0 = time.process_time()
            res[name] = mod.best_feasible_ascent(p, starts=starts, **kw)
            secs[name] = time.process_time() - t0
            total[name] += secs[name]
        move = max(res["old"].value - p.nominal_value(), 1e-300)
        lines.append(f"n={p.n} head {p.meta['head']} r={p.radius:g}: old {secs['old']:.2f} s, new {secs['new']:.2f} s, "
                     f"ratio {secs['old'] / secs['new']:.2f}; best value change / movement "
                     f"{(res['new'].value - res['old'].value) / move:.1e}")
        print(lines[-1], flush=True)
        units.append({"n": p.n, "head": p.meta["head"], "radius": p.radius, "old_s": secs["old"], "new_s": secs["new"],
                      "value_change_over_movement": (res["new"].value - res["old"].value) / move})
    lines.append(f"total: old {total['old']:.1f} s, new {total['new']:.1f} s, ratio {total['old'] / total['new']:.2f}")
    print(lines[-1])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{common.result_name(f'long_context_ascent-{args.tag}', args)}.txt"
    path.write_text("\n".join(lines) + "\n")
    return {"rev": args.rev, "units": units, "total_old_s": total["old"], "total_new_s": total["new"], "profile": path}


if __name__ == "__main__":
    common.run("profile_long_context_ascent", main, common.parse(build_parser(), QUICK))
