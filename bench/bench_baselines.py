"""Benchmark (not a test): IBP, the CROWN variants and the alpha-CROWN variants on one attention head at realistic
sizes.

Configurations (linf, radii 0.001 and 0.01, fixed and varying query):
  * d = 384, d_head = 32, n = 5 and n = 8: real all-MiniLM-L6-v2 heads (the extracted
    data/extract/all-MiniLM-L6-v2/layer3.npz: heads 0, 1, ..., prompt 0, the first n tokens, query = last
    token, specification c = specification_direction(W_O[h], seed=h));
  * d = 768, d_head = 64, n = 5: synthetic GPT-2-small-like heads (no GPT-2 weights offline): weights
    N(0, 0.14^2), biases N(0, 0.1^2), LayerNorm-like tokens gain * standardize(x) + bias with
    gain ~ |N(0.25, 0.1)|, bias ~ N(0, 0.05) (the recipe of bench/bench_exact_first_order.py).

Per unit and method: seconds of `baseline_upper_bound` and the relative gap
    (bound - best) / (best - nominal),
best = the certified lower end of `exact_worst_case` (fixed query) or the value of
`best_feasible_ascent` (varying query; a feasible value, not the optimum). Printed: medians over the
units. Every configuration runs in a fresh subprocess whose peak RSS is reported (includes ~0.3 GB of
Python + torch), together with the size of the largest dense coefficient matrix, m x n d with
m = n^2 objectives (the exp stage): the n^2 d growth noted in SPEC.

    .venv/bin/python -m bench.bench_baselines [--units 2] [--threads 1] [--quick]

Needs `data/extract/all-MiniLM-L6-v2/layer3.npz` (`snakemake --cores 1 data/extract/all-MiniLM-L6-v2/layer3.npz`).
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # 2 shared cores: avoid oversubscription
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from bench import common  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MINILM = REPO / "data" / "extract" / "all-MiniLM-L6-v2" / "layer3.npz"
CONFIGS = [  # (name, d, d_head, n)
    ("minilm-d384-n5", 384, 32, 5),
    ("minilm-d384-n8", 384, 32, 8),  # the default extraction keeps 8 tokens per prompt
    ("synthetic-d768-n5", 768, 64, 5),
]
RADII = (0.001, 0.01)
MODES = ("fixed", "varying")
from attncert.baselines.linear_bound_baselines import METHODS  # noqa: E402


def units(config: str, n: int, count: int, mode: str, radius: float):
    from attncert.head.problem import HeadProblem
    from attncert.head.specification import specification_direction

    out = []
    if config.startswith("minilm"):
        if not MINILM.exists():
            raise SystemExit(f"{MINILM} missing; run the extraction stage first (snakemake {MINILM.relative_to(REPO)})")
        f = np.load(MINILM)
        for h in range(count):
            c = specification_direction(f["W_O"][h], seed=h)
            out.append(HeadProblem(f["W_Q"][h], f["W_K"][h], f["W_V"][h], f["b_Q"][h], f["b_K"][h], f["b_V"][h],
                                   f["Z"][0, :n], n - 1, c, radius, "linf", mode))
        return out
    rng = np.random.default_rng(0)
    d, dh = 768, 64
    for _ in range(count):
        W = [rng.standard_normal((d, dh)) * 0.14 for _ in range(3)]
        b = [rng.standard_normal(dh) * 0.1 for _ in range(3)]
        x = rng.standard_normal((n, d))
        x = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)
        Z0 = x * np.abs(rng.normal(0.25, 0.1, d)) + rng.normal(0.0, 0.05, d)
        c = rng.standard_normal(dh)
        c /= np.linalg.norm(c)
        out.append(HeadProblem(W[0], W[1], W[2], b[0], b[1], b[2], Z0, n - 1, c, radius, "linf", mode))
    return out


def run_one(config: str, n: int, mode: str, count: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    from attncert.certify.best_feasible_ascent import best_feasible_ascent
    from attncert.certify.exact_worst_case import exact_worst_case
    from attncert.head.problem import random_head_problem
    from attncert.baselines.linear_bound_baselines import baseline_upper_bound

    # warm-up (first autograd / optimizer call)
    baseline_upper_bound(random_head_problem(np.random.default_rng(0), n=3, mode=mode), "alpha_crown")
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    rows, d = [], None
    for radius in RADII:
        for p in units(config, n, count, mode, radius):
            d = p.d
            nominal = p.nominal_value()
            best = exact_worst_case(p).lo if mode == "fixed" else best_feasible_ascent(p).value
            row = {"radius": radius, "nominal": nominal, "best": best}
            for m in METHODS:
                r = baseline_upper_bound(p, m)
                row[m] = {"upper": r.upper, "seconds": r.seconds, "status": r.status, "label": r.label,
                          "rel_gap": (r.upper - best) / (best - nominal) if best > nominal else float("nan")}
            rows.append(row)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return {"config": config, "n": n, "d": d, "mode": mode, "rows": rows, "peak_rss_gb": rss,
            "rss_after_import_gb": rss0, "largest_coefficient_matrix_mb": n * n * n * d * 8 / 1e6}


def summarize(res: dict) -> list[str]:
    lines = []
    for radius in RADII:
        rows = [r for r in res["rows"] if r["radius"] == radius]
        for m in METHODS:
            ok = [r[m] for r in rows if r[m]["status"] == "ok"]
            gap = np.median([o["rel_gap"] for o in ok]) if ok else float("nan")
            sec = np.median([r[m]["seconds"] for r in rows])
            below = sum(r[m]["upper"] < r["best"] for r in rows if r[m]["status"] == "ok")
            lines.append(f"{res['config']:<18} {res['mode']:<7} {radius:<6} {len(rows):>5} {m:<22} {sec:9.3f} "
                         f"{gap:9.4f} {len(rows) - len(ok):>6} {below:>8}")
    lines.append(f"{'':<18} memory: peak RSS {res['peak_rss_gb']:.2f} GB (after import + warm-up "
                 f"{res['rss_after_import_gb']:.2f} GB); largest dense coefficient matrix n^2 x n d = "
                 f"{res['largest_coefficient_matrix_mb']:.1f} MB")
    return lines


QUICK = {"units": 1, "configs": ["minilm-d384-n5"]}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=2, help="units per configuration, mode and radius")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--configs", nargs="*", default=[c[0] for c in CONFIGS], help="default: all")
    ap.add_argument("--one", nargs=3, metavar=("CONFIG", "N", "MODE"), help=argparse.SUPPRESS)
    return ap


def main(args) -> dict:
    results = []
    print("seconds, gap: medians over units; gap = (bound - best) / (best - nominal), best = exact (fixed) or "
          "ascent (varying); not_ok = status != ok; below = bounds below best (unsound; must be 0)")
    print(f"{'config':<18} {'mode':<7} {'radius':<6} {'units':>5} {'method':<22} {'seconds':>9} {'gap':>9} "
          f"{'not_ok':>6} {'below':>8}")
    for name, _, _, n in CONFIGS:
        if name not in args.configs:
            continue
        for mode in MODES:
            out = subprocess.run([sys.executable, "-m", "bench.bench_baselines", "--one", name, str(n), mode, "--units",
                                  str(args.units), "--threads", str(args.threads)], capture_output=True, text=True,
                                 check=True, cwd=common.REPO)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(res)
            print("\n".join(summarize(res)), flush=True)
    labels = {m: results[0]["rows"][0][m]["label"] for m in METHODS}
    for m, lab in labels.items():
        print(f"label {m}: {lab}")
    return {"configs": results}


if __name__ == "__main__":
    _args = common.parse(build_parser(), QUICK)
    if _args.one:  # one configuration in a fresh process (its peak memory is its own): JSON on stdout
        print(json.dumps(run_one(_args.one[0], int(_args.one[1]), _args.one[2], _args.units, _args.threads)))
    else:
        common.run("bench_baselines", main, _args)
