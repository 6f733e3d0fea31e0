"""alpha-CROWN with the convergence test against the fixed iteration count, side by side on the same units.

    .venv/bin/python -m bench.bench_alpha_convergence [--config CFG] [--random-gpt2] [--layers L ...]
                                                      [--groups G] [--settings TOL:PATIENCE:BETA1 ...] [--quick]

For every baseline group of the grid of CFG (a head, prompt, query position, norm and mode; its radii in one
call, as the pipeline bounds them) and every alpha-CROWN method of the grid, the same call is timed with

    before   patience 0 and Adam betas (0.9, 0.99): the best of all `alpha_iterations` steps per stage (a fixed
             iteration count);
    after    each TOL:PATIENCE:BETA1 (default: CFG's alpha_tolerance : alpha_patience : alpha_betas[0]; beta2 from
             CFG), the same iteration cap and lr,

in an order that alternates from group to group, so load drifts hit both alike. The reference value of a unit
(for its gap) is what the certification stage attains on it (`certify_unit`, no second order): the exact
witness under a fixed query, the warm-started ascent under a varying one. Per method and mode it prints seconds
per unit (median of before / after), the speed-up (sum of before seconds / sum of after seconds) and the
loosening (U_after - U_before) / (U_before - reference): median, max, share > 1e-3 (negative = tighter).

--random-gpt2: the model is the SYNTHETIC GPT-2-shaped `random-gpt2` (seeded random weights, not GPT-2), as in
bench/paper_cost.py; the grid is still CFG's. --groups G draws G groups per mode (seeded), default all.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import copy  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

from attncert.baselines.linear_bound_baselines import METHOD_SPECS, baseline_upper_bounds  # noqa: E402
from attncert.certify.run import certify_unit  # noqa: E402
from attncert.head.units import Unit, head_problem, specification_vectors  # noqa: E402
from attncert.model.model_source import model_dimensions  # noqa: E402
from attncert.model.model_source import model_label  # noqa: E402
from bench import common  # noqa: E402
from bench.paper_cost import RANDOM_GPT2, extract, load, pick  # noqa: E402
from bench.paper_units import load_config  # noqa: E402


def groups_of(cfg: dict, layers: list[int], heads: int) -> list[list[Unit]]:
    b = cfg["baselines"]
    prompts = b.get("prompts", list(range(cfg["n_prompts"])))
    return [[Unit(L, h, p, qp, float(r), nm, md) for r in b["radii"]]
            for L in layers for h in range(heads) for p in prompts for qp in b["query_positions"]
            for nm in b["norms"] for md in b["modes"]]


def attained(problem, cfg: dict) -> float:
    c = cfg["certify"]
    row = certify_unit(problem, ascent_restarts=c["ascent_restarts"], ascent_steps=c["ascent_steps"], seed=c["seed"],
                       second_order=False, tight=False, ascent_check_fraction=0.0, device=cfg.get("device", "cpu"))
    return float(np.nanmax([row["exact_lo"], row["best_feasible"]]))


QUICK = {"layers": [3], "groups": 1}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "workflow" / "config" / "default.yaml"))
    ap.add_argument("--random-gpt2", action="store_true", help="SYNTHETIC GPT-2-shaped model (not GPT-2)")
    ap.add_argument("--layers", type=int, nargs="*", default=None, help="default: the config's layers")
    ap.add_argument("--groups", type=int, default=None, help="groups per mode (default: all)")
    ap.add_argument("--settings", nargs="*", default=None, help="TOL:PATIENCE:BETA1 of the after runs")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main(args) -> dict:
    torch.set_num_threads(1)
    t_start, load_start = time.perf_counter(), load()
    cfg = copy.deepcopy(load_config(args.config))
    if args.random_gpt2:
        cfg["model"] = dict(RANDOM_GPT2)
    b = cfg["baselines"]
    cap, lr, beta2 = int(b["alpha_iterations"]), float(b["alpha_lr"]), float(b["alpha_betas"][1])
    settings = [(0.0, 0, 0.9)] + [
        (float(t), int(p), float(b1))
        for t, p, b1 in (
            s.split(":")
            for s in (args.settings or [f"{b['alpha_tolerance']}:{b['alpha_patience']}:{b['alpha_betas'][0]}"])
        )
    ]
    n_layers, n_heads = model_dimensions(cfg["model"])[:2]
    layers = args.layers if args.layers is not None else (
        list(range(n_layers)) if cfg["layers"] == "all" else list(cfg["layers"]))
    methods = [m for m in b["methods"] if METHOD_SPECS[m].algorithm.startswith("alpha_crown")]
    arrays, _ = extract(cfg, layers)
    groups = groups_of(cfg, layers, n_heads)
    if args.groups is not None:
        rng = np.random.default_rng(args.seed)
        groups = [g for md in b["modes"] for g in pick(rng, [g for g in groups if g[0].mode == md], args.groups)]
    qps = list(cfg["certify"]["query_positions"])
    specs = {L: specification_vectors(arrays[L], L, qps, cfg["spec_seed"]) for L in layers}
    rows = []
    for gi, g in enumerate(groups):
        problems = [head_problem(arrays[u.layer], specs[u.layer], qps, u) for u in g]
        refs = [attained(p, cfg) for p in problems]
        for m in methods:
            order = list(range(len(settings)))
            if gi % 2:
                order.reverse()
            out = {}
            for k in order:
                tol, pat, b1 = settings[k]
                t0 = time.perf_counter()
                res = baseline_upper_bounds(problems, m, alpha_iterations=cap, alpha_lr=lr, alpha_tolerance=tol,
                                            alpha_patience=pat, alpha_betas=(b1, beta2), device=cfg["device"])
                out[k] = (time.perf_counter() - t0, [r.upper for r in res], [r.status for r in res])
            for j, u in enumerate(g):
                rows.append({"method": m, "mode": u.mode, "unit": repr(u), "reference": refs[j],
                             "seconds": [out[k][0] / len(g) for k in range(len(settings))],
                             "upper": [out[k][1][j] for k in range(len(settings))],
                             "status": [out[k][2][j] for k in range(len(settings))]})
        print(f"[{time.perf_counter() - t_start:6.0f} s] group {gi + 1}/{len(groups)}", file=sys.stderr, flush=True)
    load_end = load()
    lines = [f"# alpha-CROWN (cap {cap}, lr {lr:g}): before = {cap} steps, betas (0.9, {beta2:g}) — "
             f"{model_label(cfg['model'])}, layers {layers}, "
             f"{len(groups)} groups x {len(b['radii'])} radii", "",
             f"Load at start: {load_start}; at end: {load_end}.", "",
             "| method | mode | after: tol:patience:beta1 | units | s/unit before (median) | s/unit after (median) | "
             "speed-up (sum) | loosening/gap median | max | share > 1e-3 | tighter units | not ok |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in methods:
        for md in b["modes"]:
            sub = [r for r in rows if r["method"] == m and r["mode"] == md]
            for k in range(1, len(settings)):
                ok = [r for r in sub if r["status"][0] == "ok" and r["status"][k] == "ok"]
                before = np.array([r["seconds"][0] for r in sub])
                after = np.array([r["seconds"][k] for r in sub])
                loos = np.array([(r["upper"][k] - r["upper"][0]) / (r["upper"][0] - r["reference"]) for r in ok])
                lines.append(
                    f"| {m} | {md} | {settings[k][0]:g}:{settings[k][1]}:{settings[k][2]:g} | {len(sub)} | "
                    f"{np.median(before):.4f} | {np.median(after):.4f} | {before.sum() / after.sum():.2f} | "
                    f"{np.median(loos):.2e} | {loos.max():.2e} | {np.mean(loos > 1e-3):.3f} | "
                    f"{int(np.sum(loos < 0))} | {len(sub) - len(ok)} |"
                )
    lines.append(f"\nBench wall time {time.perf_counter() - t_start:.0f} s.")
    print("\n".join(lines))
    return {"model": model_label(cfg["model"]), "layers": layers, "settings": settings, "rows": rows}


if __name__ == "__main__":
    common.run("bench_alpha_convergence", main, common.parse(build_parser(), QUICK))
