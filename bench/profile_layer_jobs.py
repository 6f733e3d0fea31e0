"""cProfile of the two per-layer jobs `certify_layer` and `baselines_layer`, run directly on a finished run's inputs.

Each job's work is what its workflow script (workflow/scripts/certify_layer.py, baselines_layer.py) calls, with
the configuration the run recorded (`data/run/{model}/config.yaml`): the same library functions on the same
layer file, specification and certification table; outputs go to --out, never into the run's data/. The
report is the wall and CPU seconds, then the top --top functions by cumulative and by own time (pstats text, in
CPU seconds of this process by default: --timer).

    python -m bench.profile_layer_jobs --job certify_layer --data /path/to/run/data --part before \
        --results bench/results/profiles

On a shared, loaded machine wall seconds are noisy: read the shares of the profile, and compare code versions
side by side in one process (bench.layer_jobs_side_by_side). The code profiled is the `attncert` on the path:
`PYTHONPATH=DIR/src` with DIR an export of an earlier revision (`git archive REV src | tar -x -C DIR`) profiles it.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path

from bench import common

common.single_threaded_blas()

JOBS = ("certify_layer", "baselines_layer")
QUICK = {"heads": [0]}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", choices=JOBS, required=True)
    ap.add_argument("--data", type=Path, default=Path("data"), help="a finished run's data/ directory (read only)")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--layer", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "profile_layer_jobs",
                    help="the job's outputs (default: under the system temporary directory)")
    ap.add_argument("--part", default=None, help="label of the result file (e.g. before, after)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--heads", type=int, nargs="+", default=None, help="only these heads (default: the run's)")
    ap.add_argument("--timer", choices=("cpu", "wall"), default="cpu",
                    help="the profile's clock: this process's CPU seconds (default; less disturbed by other work on "
                         "a shared machine) or wall seconds")
    return ap


def run_config(data: Path, model: str) -> dict:
    import yaml

    with open(data / "run" / model / "config.yaml") as fh:
        return yaml.safe_load(fh)


def _heads(cfg: dict, arrays: dict, only) -> list[int]:
    heads = list(range(arrays["W_Q"].shape[0])) if cfg["heads"] == "all" else list(cfg["heads"])
    return heads if only is None else [h for h in heads if h in only]


def certify_layer_job(cfg: dict, data: Path, model: str, layer: int, out: Path, only=None):
    """What workflow/scripts/certify_layer.py computes: (table, certificate entries, row pool)."""
    from attncert.certify.certificate_store import write_certificates
    from attncert.certify.layer_run import certify_layer_units
    from attncert.head.units import grid, specification_vectors
    from attncert.model.extraction import load_layer

    c = cfg["certify"]
    arrays = load_layer(data / "extract" / model / f"layer{layer}.npz")
    heads = _heads(cfg, arrays, only)
    qps = list(c["query_positions"])
    spec = specification_vectors(arrays, layer, qps, cfg["spec_seed"])
    units = grid(heads, c.get("prompts", list(range(cfg["n_prompts"]))), qps, c["radii"], c["norms"], c["modes"],
                 layer, varying=c.get("varying", {}))
    df, entries, pool = certify_layer_units(arrays, spec, qps, units, layer, ascent_restarts=c["ascent_restarts"],
                                           ascent_steps=c["ascent_steps"], seed=c["seed"],
                                           second_order=c["second_order"], tight=c["tight"],
                                           ascent_check_fraction=c["ascent_check_fraction"], device=cfg["device"])
    write_certificates(out / f"layer{layer}_certificates.npz", entries, pool)
    df.to_csv(out / f"layer{layer}.csv", index=False, float_format="%.17g")
    return df


def baselines_layer_job(cfg: dict, data: Path, model: str, layer: int, out: Path, only=None):
    """What workflow/scripts/baselines_layer.py computes: the baseline rows of the layer."""
    import pandas as pd

    from attncert.baselines.layer import attained_by_unit, bound_layer
    from attncert.certify.second_order.certificate import second_order_certificate
    from attncert.head.units import load_specification
    from attncert.model.extraction import load_layer

    b = cfg["baselines"]
    arrays = load_layer(data / "extract" / model / f"layer{layer}.npz")
    spec, qps = load_specification(data / "certify" / model / f"layer{layer}_spec.npz")
    heads = _heads(cfg, arrays, only)
    grid = {"heads": heads, "prompts": list(b.get("prompts", list(range(cfg["n_prompts"])))),
            **{k: list(b[k]) for k in ("query_positions", "norms", "modes", "radii")}}
    alpha = {k: b[k] for k in ("alpha_iterations", "alpha_tolerance", "alpha_patience", "alpha_lr", "alpha_betas")}
    attained = attained_by_unit(pd.read_csv(data / "certify" / model / f"layer{layer}.csv"))
    df = bound_layer(load_layer(data / "extract" / model / f"layer{layer}.npz"), spec, qps, layer, grid,
                     list(b["methods"]), attained, alpha=alpha, device=cfg["device"],
                     certificate=second_order_certificate)
    df.to_csv(out / f"layer{layer}.csv", index=False, float_format="%.17g")
    return df


def main(args) -> dict:
    import torch

    torch.set_num_threads(1)
    cfg = run_config(args.data, args.model)
    out = args.out / args.job
    out.mkdir(parents=True, exist_ok=True)
    job = certify_layer_job if args.job == "certify_layer" else baselines_layer_job
    prof = cProfile.Profile(time.process_time if args.timer == "cpu" else time.perf_counter)
    t0, c0 = time.perf_counter(), time.process_time()
    prof.enable()
    df = job(cfg, args.data, args.model, args.layer, out, args.heads)
    prof.disable()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{args.job} layer {args.layer}: {len(df)} rows, {seconds:.1f} s wall, {cpu:.1f} s CPU under cProfile "
          f"(shared machine); the profile below in {args.timer} seconds")
    print(f"outputs: {out}")
    for key in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(args.top)
        text = buf.getvalue()
        print(f"\n--- top {args.top} by {key} ---")
        print(text[text.find("   ncalls"):].rstrip())
    return {"job": args.job, "layer": args.layer, "rows": len(df), "seconds": seconds, "cpu_seconds": cpu}


if __name__ == "__main__":
    a = common.parse(build_parser(), QUICK)
    common.run(f"profile_{a.job}", main, a, part=a.part)
