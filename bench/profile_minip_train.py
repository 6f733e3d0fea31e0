"""Profile one model's runs of a Min-IP training job (workflow/scripts/minip_train.py): its phases and a cProfile.

    python -m bench.profile_minip_train \
        --setting witness --model r8 --tag before

Phases timed (wall seconds, one process): importing the script's modules (torch among them), building the
witness family, and each seed's run (`run_witness` / `run_scaling`, the same calls with the same params as the
rule: `minip.sweep.run_params` of workflow/config/default.yaml). The runs are then repeated under cProfile
and the top 30 functions by cumulative and by own time written to
bench/results/profiles/minip_train-{setting}-{model}-{tag}[-quick].txt (with this command line), and the phases to
`profile_minip_train[-quick].md` / `.json` (bench/common.py; --quick: seed 0 only). The machine may be
loaded: the absolute seconds are noisy, the shares within one profile are not. One BLAS/OpenMP thread, as the rule.
"""
from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from bench import common  # noqa: E402

common.single_threaded_blas()

REPO = common.REPO
QUICK = {"seeds": "0"}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", default="witness")
    ap.add_argument("--model", default="r8")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--config", default=str(REPO / "workflow/config/default.yaml"))
    ap.add_argument("--tag", default="before")
    ap.add_argument("--out", default=str(REPO / "bench/results/profiles"))
    return ap


def main(args) -> dict:

    t0 = time.perf_counter()
    import torch  # noqa: F401 - what the job imports, timed

    from attncert.minip.sweep import parse_model, parse_setting, run_params
    from attncert.minip.training import TrainConfig, run_scaling, run_witness
    from attncert.minip.witness import witness_family
    t_import = time.perf_counter() - t0

    import yaml
    cfg = yaml.safe_load(open(args.config))
    run = run_params(cfg["minip"], args.setting, "cpu")
    kind, rank = parse_model(args.model)
    what, bits, length = parse_setting(args.setting)
    train = TrainConfig(**run["train"])
    seeds = [int(s) for s in args.seeds.split(",")]

    t0 = time.perf_counter()
    family = None
    if what == "witness":
        w = run["witness"]
        family = witness_family(w["bits"], w["queries"], w["ladder_step"])
    t_family = time.perf_counter() - t0

    def one(seed):
        if what == "witness":
            return run_witness(family=family, kind=kind, rank=rank, seed=seed, train=train, device="cpu")
        return run_scaling(bits=bits, length=length, kind=kind, rank=rank, seed=seed, train=train, device="cpu",
                           **run["scaling"])

    lines = [f"command: {' '.join(sys.argv)}",
             f"torch threads {torch.get_num_threads()}; wall seconds, one process (machine shared: noisy)",
             f"interpreter start -> main: {t0 - T_START - t_import - t_family:.2f} s (bench script's own imports)",
             f"import torch + attncert.minip: {t_import:.2f} s", f"witness family: {t_family:.3f} s"]
    records = []
    for seed in seeds:
        t0 = time.perf_counter()
        rec = one(seed)
        records.append(rec)
        lines.append(f"seed {seed}: {time.perf_counter() - t0:.2f} s (record seconds {rec['seconds']:.2f}), "
                     f"error {rec.get('error', rec.get('error_ood'))}, final_loss {rec['final_loss']!r}")
    prof = cProfile.Profile()
    prof.enable()
    for seed in seeds:
        one(seed)
    prof.disable()
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(30)
        lines += [f"\n=== top 30 by {key} (cProfile, seeds {args.seeds}) ===", s.getvalue()]
    text = "\n".join(lines)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{common.result_name(f'minip_train-{args.setting}-{args.model}-{args.tag}', args)}.txt"
    path.write_text(text)
    print("\n".join(lines[:5 + len(seeds)]))
    print(f"written {path}")
    return {"setting": args.setting, "model": args.model, "import_seconds": t_import, "family_seconds": t_family,
            "seeds": {seed: {"seconds": rec["seconds"], "error": rec.get("error", rec.get("error_ood")),
                             "final_loss": rec["final_loss"]} for seed, rec in zip(seeds, records)},
            "profile": path}


if __name__ == "__main__":
    common.run("profile_minip_train", main, common.parse(build_parser(), QUICK))
