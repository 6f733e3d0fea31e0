"""cProfile of one `block_transition` job's work (workflow/scripts/block_transition.py) on a finished run's inputs.

    python -m bench.profile_block_transition [--data DATA] [--transition 0] --out PREFIX

Runs `analyze_transition` with the parameters of workflow/config/default.yaml (block section, all heads,
spec_seed) on DATA/extract/{model}/layer{L}.npz and layer{L+1}.npz, one thread, and writes PREFIX.txt: the
command, the per-phase CPU seconds, and the top 30 functions by cumulative and by total time. With --csv also
the job's row table (to compare outputs before and after a change). --heads / --radii restrict the units to a
subset of the configured ones. The summary is also written to `profile_block_transition[-quick].md` / `.json`
(bench/common.py; --quick: one head, one radius).
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

REPO = common.REPO
QUICK = {"heads": [0], "radii": [0.001]}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(REPO / "data"))
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--transition", type=int, default=0)
    ap.add_argument("--config", default=str(REPO / "workflow" / "config" / "default.yaml"))
    ap.add_argument("--out", required=True, help="output prefix: PREFIX.txt (profile), PREFIX.csv with --csv")
    ap.add_argument("--csv", action="store_true", help="also write the row table and certificate arrays")
    ap.add_argument("--no-profile", action="store_true", help="time only (no cProfile overhead)")
    ap.add_argument("--heads", type=int, nargs="+", default=None, help="only these heads (default: the config's)")
    ap.add_argument("--radii", type=float, nargs="+", default=None, help="only these radii (default: the config's)")
    return ap


def main(a) -> dict:
    import numpy as np
    import torch
    import yaml

    torch.set_num_threads(1)
    from attncert.block.build import transition_from_arrays
    from attncert.block.certificate import certificate_file_arrays
    from attncert.block.residual import analyze_transition, transition_table
    from attncert.head.specification import specification_rows
    from attncert.model.extraction import load_layer

    cfg = yaml.safe_load(open(a.config))
    b, L = cfg["block"], a.transition
    base = Path(a.data) / "extract" / a.model
    arrays, nxt = load_layer(base / f"layer{L}.npz"), load_layer(base / f"layer{L + 1}.npz")
    prompt, position = int(b["prompt"]), int(b["query_position"])
    tr = transition_from_arrays(arrays, nxt, L, prompt, position)
    heads = list(range(nxt["W_Q"].shape[0])) if cfg["heads"] == "all" else list(cfg["heads"])
    heads = heads if a.heads is None else [h for h in heads if h in a.heads]
    radii = b["radii"] if a.radii is None else list(a.radii)
    C = specification_rows(nxt["W_V"], nxt["W_O"], L + 1, heads, prompt, position, cfg["spec_seed"])
    stored: dict = {}

    def work():
        return analyze_transition(
            tr, C, radii, qp_starts=b["qp_starts"], sdp_iterations=b["sdp_iterations"],
            ascent_restarts=b["ascent_restarts"], ascent_steps=b["ascent_steps"], seed=b["seed"],
            sdp_rounding_starts=b["sdp_rounding_starts"], alpha_crown=b["alpha_crown"],
            reference=nxt["Z"][prompt, position], keep=stored)

    prof = None if a.no_profile else cProfile.Profile()
    t0, c0 = time.perf_counter(), time.process_time()
    if prof is None:
        rows, timings = work()
    else:
        rows, timings = prof.runcall(work)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = io.StringIO()
    out.write(f"command: {' '.join(['python -m bench.profile_block_transition', *sys.argv[1:]])}\n")
    out.write(f"wall seconds {wall:.1f}, cpu seconds {cpu:.1f}{'' if prof is None else ' under cProfile'} (2 shared "
              "cores: noisy; compare shares)\n")
    out.write("cpu seconds per phase: " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()) + "\n\n")
    if prof is not None:
        for key in ("cumulative", "tottime"):
            st = pstats.Stats(prof, stream=out)
            st.sort_stats(key).print_stats(30)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out + ".txt").write_text(out.getvalue())
    print(out.getvalue()[:600])
    if a.csv:
        df = transition_table(rows, timings, tr, heads, a.model, prompt)
        df.to_csv(a.out + ".csv", index=False, float_format="%.17g")
        np.savez_compressed(a.out + "_certificates.npz", **certificate_file_arrays(stored["certificate"], heads))
    return {"transition": L, "heads": heads, "radii": radii, "rows": len(rows), "wall_seconds": wall,
            "cpu_seconds": cpu, "cpu_seconds_per_phase": dict(timings), "profile": a.out + ".txt"}


if __name__ == "__main__":
    common.run("profile_block_transition", main, common.parse(build_parser(), QUICK))
