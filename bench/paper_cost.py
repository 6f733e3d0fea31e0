"""Measured cost of `workflow/config/paper.yaml`, on the SYNTHETIC GPT-2-shaped model `random-gpt2`.

    .venv/bin/python -m bench.paper_cost [--sample N] [--path both|after|before] [--layer L]
                                         [--block-heads K] [--minip-runs R] [--seed S] [--part NAME] [--quick]

What runs (all with the paper config's settings; the model is `model.source: random-gpt2`, GPT-2 small's
architecture with seeded random weights: NOT GPT-2, so these are costs, not results):
  * extraction: the model is built and the 5 prompts x 16 tokens run through the real extraction path
    (layers L and L + 1);
  * certification: the units of layer L of the paper grid (fixed query: 4 query positions x 5 prompts x
    6 radii x 12 heads; varying query: position 4 x 4 radii), `certify.layer_run.certify_in_radius_batches`
    exactly as the pipeline calls it; `--sample N` draws N units stratified by (mode, query position), always
    including the certification units of the sampled baseline units; a sampled varying unit brings its radius
    batch (the varying units of its head, prompt and position, and the fixed-query units at those radii, whose
    exact solves warm-start the batch's ascents), and each varying unit is charged the batch's seconds / its size;
  * baselines: every method of `baselines.linear_bound_baselines` (METHODS + EXTRA_METHODS) on the
    baseline units of layer L (all radii of a (head, prompt, mode) in one call, as the pipeline does);
    `--sample N` draws N / 4 such groups;
  * block: the transition L -> L + 1 with `--block-heads` heads (default 12: one full block job);
  * Min-IP: `--minip-runs` runs of the paper sweep, drawn stratified by setting kind (witness, length 3,
    length 2) and model (rank, dense): a run's cost grows with the rank.
Per stage it prints the units, seconds per unit (median, p90, mean over the sample) and the extrapolated
CPU-hours of the whole paper.yaml: the sum over strata (certification: mode x query position; baselines:
method x mode; Min-IP: setting kind x model, an unsampled model at its kind's mean) of mean seconds x the
stratum's unit count in paper.yaml (bench/paper_units.py).

"before" / "after" (certification only; every other stage runs once, its time counted in both totals and shown as
"(not re-run)"; alpha-CROWN's stopping rule is measured by bench_alpha_convergence, the certificate's solve path by
bench_certificate_ratio):
  after   the pipeline's path: fixed query, best feasible = the exact witness, ascent only on the
          `ascent_check_fraction` sample; varying query, ascent warm-started from the exact fixed-query
          maximiser, fused projections, early stop;
  before  the reference path `certify_unit(..., legacy_ascent=True)` (cold multi-start ascent with full
          projections on every unit).
`--path both` (default) runs the after path and, on the same units, only the legacy ascent; before =
after - after's ascent time + the legacy ascent time (every other part of a unit is shared).
`--path before` runs the whole legacy path instead.

Also printed: the certificate / CROWN time ratio on the same units (certificate = first + second order,
the bound a user gets; exact solve and ascent are reference values), and the machine load (`os.getloadavg`)
at start and end: on a shared machine every time is inflated by the load.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TQDM_DISABLE", "1")  # the Min-IP runs draw progress bars

import argparse  # noqa: E402
import copy  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from attncert.baselines.linear_bound_baselines import EXTRA_METHODS, METHODS, baseline_upper_bounds  # noqa: E402
from attncert.certify.best_feasible_ascent import best_feasible_ascent  # noqa: E402
from attncert.certify.layer_run import certify_in_radius_batches  # noqa: E402
from attncert.head.units import Unit, grid, head_problem, specification_vectors  # noqa: E402
from attncert.configuration.config import read_prompts  # noqa: E402
from attncert.model.extraction import extract_layers, load_model, tokenize_prompts  # noqa: E402
from attncert.model.model_source import model_label  # noqa: E402
from bench import common  # noqa: E402
from bench.paper_units import load_config, unit_counts  # noqa: E402

REPO = common.REPO

RANDOM_GPT2 = {"name": "random-gpt2", "family": "gpt2", "source": "random-gpt2", "seed": 0}


def stats(xs) -> dict:
    x = np.asarray([v for v in xs if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return {"n": 0, "median": math.nan, "p90": math.nan, "mean": math.nan}
    return {"n": int(x.size), "median": float(np.median(x)), "p90": float(np.quantile(x, 0.9)), "mean": float(x.mean())}


def load() -> str:
    a = os.getloadavg()
    return f"load average {a[0]:.2f}, {a[1]:.2f}, {a[2]:.2f} on {os.cpu_count()} cores"


def extract(cfg: dict, layers: list[int]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    loaded = load_model(cfg["model"])
    ids = tokenize_prompts(loaded.tokenizer, read_prompts(REPO / cfg["prompts"], cfg["n_prompts"]), cfg["max_tokens"])
    arrays = extract_layers(loaded.model, loaded.family, ids, layers)
    return arrays, time.perf_counter() - t0


def pick(rng, items: list, k: int) -> list:
    if k >= len(items):
        return list(items)
    return [items[i] for i in sorted(rng.choice(len(items), size=k, replace=False))]


def sample_units(cfg: dict, L: int, sample: int | None, rng) -> tuple[list[Unit], list[list[Unit]]]:
    """(certification units, baseline groups of units) of layer L, subsampled when `sample` is set."""
    c, b = cfg["certify"], cfg["baselines"]
    heads, prompts = list(range(12)), list(range(cfg["n_prompts"]))
    cert = grid(heads, c.get("prompts", prompts), c["query_positions"], c["radii"], c["norms"], c["modes"], L,
                varying=c.get("varying"))
    groups = [[Unit(L, h, p, qp, float(r), nm, md) for r in b["radii"]]
              for h in heads for p in b.get("prompts", prompts) for qp in b["query_positions"]
              for nm in b["norms"] for md in b["modes"]]
    if sample is None:
        return cert, groups
    by_mode = defaultdict(list)
    for g in groups:
        by_mode[g[0].mode].append(g)
    per_mode = max(1, sample // (4 * len(by_mode)))
    groups = [g for md in sorted(by_mode) for g in pick(rng, by_mode[md], per_mode)]
    strata = defaultdict(list)
    for u in cert:
        strata[(u.mode, u.query_pos)].append(u)
    per = max(2, sample // len(strata))
    chosen = {u for s in strata.values() for u in pick(rng, s, per)} | {u for g in groups for u in g}
    # a varying unit comes with its radius batch, as the pipeline certifies it: every varying unit of its
    # (head, prompt, query position, norm) and the fixed-query units at those radii (their exact solves warm-start it)
    batches = {radius_group(u) for u in chosen if u.mode == "varying"}
    radii = {(radius_group(u), u.radius) for u in cert if u.mode == "varying" and radius_group(u) in batches}
    chosen |= {u for u in cert if (radius_group(u), u.radius) in radii}
    return [u for u in cert if u in chosen], groups


def radius_group(u: Unit) -> tuple:
    """The units the pipeline batches (`certify.layer_run.certify_in_radius_batches`): all but radius and mode."""
    return (u.layer, u.head, u.prompt, u.query_pos, u.norm)


def certification(cfg: dict, arrays: dict, L: int, units: list[Unit], path: str, log) -> list[dict]:
    """Per unit: its row and seconds. The after path runs the units as the pipeline does
    (`certify_in_radius_batches`, in grid order): a radius batch's varying-query ascents run together when its
    first varying unit comes up, warm-started from the fixed-query units' exact solves; each varying unit is
    charged its batch's varying seconds / the batch's varying units."""
    c = cfg["certify"]
    qps = list(c["query_positions"])
    spec = specification_vectors(arrays, L, qps, cfg["spec_seed"])
    kw = dict(ascent_restarts=c["ascent_restarts"], ascent_steps=c["ascent_steps"], seed=c["seed"],
              second_order=c.get("second_order", True), tight=c.get("tight", True),
              ascent_check_fraction=c["ascent_check_fraction"],
              device=cfg["device"], legacy_ascent=(path == "before"))
    items = [(radius_group(u), head_problem(arrays, spec, qps, u)) for u in units]
    out, t0 = [], time.perf_counter()
    for i, row, _ in certify_in_radius_batches(items, desc="certification", **kw):
        wall, t0 = time.perf_counter() - t0, time.perf_counter()
        u = units[i]
        rec = {"mode": u.mode, "qp": u.query_pos, "radius": u.radius, "unit": u, "row": row, "status": row["status"],
               "cert_s": row["t_first_s"] + row["t_second_s"], "tight_s": row.get("t_second_tight_s", math.nan)}
        rec.update(before=wall, after=math.nan) if path == "before" else rec.update(after=wall)
        out.append(rec)
        if (i + 1) % 20 == 0:
            log(f"  certification {i + 1}/{len(units)} units")
    if path != "before":
        shared = defaultdict(list)
        for r in out:
            if r["mode"] == "varying":
                shared[radius_group(r["unit"])].append(r)
        for batch in shared.values():
            mean = sum(r["after"] for r in batch) / len(batch)
            for r in batch:
                r["after"] = mean
    if path == "both":  # the former ascent on the same unit; the rest of the unit is shared
        for r in out:
            row = r["row"]
            asc = sum(v for v in (row["t_ascent_s"], row["t_ascent_check_s"]) if math.isfinite(v))
            legacy = best_feasible_ascent(items[units.index(r["unit"])][1], restarts=c["ascent_restarts"],
                                          steps=c["ascent_steps"], seed=c["seed"], fused=False)
            r.update(before=r["after"] - asc + legacy.seconds, legacy_value=legacy.value)
    return out


def baselines(arrays: dict, cfg: dict, L: int, groups: list[list[Unit]], methods: list[str], log) -> list[dict]:
    qps = list(cfg["certify"]["query_positions"])
    spec = specification_vectors(arrays, L, qps, cfg["spec_seed"])
    b = cfg["baselines"]  # the alpha-CROWN settings and device as the pipeline passes them
    kw = dict(alpha_iterations=b["alpha_iterations"], alpha_tolerance=b["alpha_tolerance"],
              alpha_patience=b["alpha_patience"], alpha_lr=b["alpha_lr"], alpha_betas=tuple(b["alpha_betas"]),
              device=cfg["device"])
    out = []
    for i, g in enumerate(groups):
        problems = [head_problem(arrays, spec, qps, u) for u in g]
        for m in methods:
            for u, res in zip(g, baseline_upper_bounds(problems, m, **kw)):
                out.append({"method": m, "mode": u.mode, "unit": u, "seconds": res.seconds, "status": res.status})
        log(f"  baselines group {i + 1}/{len(groups)}")
    return out


def block(cfg: dict, arrays: dict, nxt: dict, L: int, heads: list[int]) -> float:
    from attncert.block.build import transition_from_arrays
    from attncert.head.specification import specification_rows
    from attncert.block.residual import analyze_transition

    b = cfg["block"]
    prompt, position = int(b["prompt"]), int(b["query_position"])
    t0 = time.perf_counter()
    tr = transition_from_arrays(arrays, nxt, L, prompt, position)
    C = specification_rows(nxt["W_V"], nxt["W_O"], L + 1, heads, prompt, position, cfg["spec_seed"])
    analyze_transition(tr, C, b["radii"], qp_starts=b["qp_starts"], sdp_iterations=b["sdp_iterations"],
                       ascent_restarts=b["ascent_restarts"], ascent_steps=b["ascent_steps"], seed=b["seed"],
                       reference=nxt["Z"][prompt, position])
    return time.perf_counter() - t0


def minip_group(setting: str) -> str:
    return "witness" if setting == "witness" else f"scaling n={setting.split('-n')[1]}"


def minip(cfg: dict, k: int, rng, log) -> list[dict]:
    from attncert.minip.sweep import parse_model, parse_setting, run_params, runs
    from attncert.minip.training import TrainConfig, run_scaling, run_witness
    from attncert.minip.witness import witness_family

    m = cfg["minip"]
    by = defaultdict(list)  # strata: (setting kind, model); a run's cost grows with the model's rank
    for r in runs(m):
        by[(minip_group(r.setting), r.model)].append(r)
    keys = sorted(by)
    chosen = [r for i, s in enumerate(keys) for r in pick(rng, by[s], k // len(keys) + (i < k % len(keys)))]
    out = []
    for r in chosen:
        params, (kind, rank), (what, bits, length) = (
            run_params(m, r.setting, cfg["device"]),
            parse_model(r.model),
            parse_setting(r.setting),
        )
        train = TrainConfig(**params["train"])
        t0 = time.perf_counter()
        if what == "witness":
            w = params["witness"]
            run_witness(family=witness_family(w["bits"], w["queries"], w["ladder_step"]), kind=kind, rank=rank,
                        seed=r.seed, train=train, device=params["device"])
        else:
            run_scaling(bits=bits, length=length, kind=kind, rank=rank, seed=r.seed, train=train,
                        device=params["device"], **params["scaling"])
        out.append({"group": minip_group(r.setting), "model": r.model, "run": r.path,
                    "seconds": time.perf_counter() - t0})
        log(f"  Min-IP {r.path}: {out[-1]['seconds']:.1f} s")
    return out


def minip_hours(cfg: dict, mini: list[dict]) -> dict:
    """Per setting kind: CPU-hours of the paper sweep's runs, the sum over its (kind, model) strata of the
    stratum's mean seconds x its runs; a stratum without a sampled run takes the mean of its kind's sampled runs."""
    from attncert.minip.sweep import runs

    count = defaultdict(int)
    for r in runs(cfg["minip"]):
        count[(minip_group(r.setting), r.model)] += 1
    out = {}
    for g in sorted({g for g, _ in count}):
        seen = [r["seconds"] for r in mini if r["group"] == g]
        if not seen:
            continue
        fill = float(np.mean(seen))
        out[g] = sum(float(np.mean([r["seconds"] for r in mini if (r["group"], r["model"]) == s] or [fill])) * n
                     for s, n in count.items() if s[0] == g) / 3600
    return out


def hours(per_stratum: dict, counts: dict) -> float:
    """sum over strata of mean seconds x count, in hours (strata without a sample are skipped)."""
    return sum(per_stratum[s]["mean"] * counts[s] for s in counts if s in per_stratum and per_stratum[s]["n"]) / 3600


def fmt(x: float, digits: int = 3) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


QUICK = {"sample": 8, "path": "after", "block_heads": 1, "minip_runs": 1, "stages": "certify,baselines,minip"}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=None, help="units per stage (default: the whole layer)")
    ap.add_argument("--path", choices=["both", "after", "before"], default="both")
    ap.add_argument("--layer", type=int, default=5)
    ap.add_argument("--block-heads", type=int, default=12)
    ap.add_argument("--minip-runs", type=int, default=35,
                    help="Min-IP runs, spread over the (setting kind, model) strata (35 in paper.yaml)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the samples (the model's seed is 0)")
    ap.add_argument("--init-std", type=float, default=None,
                    help="std of random-gpt2's init (default GPT2Config's 0.02; larger = wider score intervals)")
    ap.add_argument("--stages", default="certify,baselines,block,minip",
                    help="comma-separated subset to measure (a skipped stage counts 0 h)")
    ap.add_argument("--config", default=str(REPO / "workflow" / "config" / "paper.yaml"))
    ap.add_argument("--part", help="a name for this result (paper_cost-PART)")
    return ap


def main(args) -> dict:
    torch.set_num_threads(1)
    t_start, load_start = time.perf_counter(), load()
    log = lambda msg: print(f"[{time.perf_counter() - t_start:7.0f} s] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    paper = load_config(args.config)
    cfg = copy.deepcopy(paper)
    cfg["model"] = dict(RANDOM_GPT2, **({"init_std": args.init_std} if args.init_std else {}))
    counts = unit_counts(paper)
    rng = np.random.default_rng(args.seed)
    L = args.layer
    log(f"start: {load_start}; model {model_label(cfg['model'])}")
    arrays, t_extract = extract(cfg, [L, L + 1])
    log(f"extraction {t_extract:.1f} s")
    stages = set(args.stages.split(","))
    units, groups = sample_units(cfg, L, args.sample, rng)
    log(f"certification: {len(units)} units of layer {L} (path {args.path})")
    cert = certification(cfg, arrays[L], L, units, args.path, log) if "certify" in stages else []
    methods = list(METHODS) + list(EXTRA_METHODS)
    log(f"baselines: {len(groups)} groups x {len(groups[0])} radii x {len(methods)} methods")
    base = baselines(arrays[L], cfg, L, groups, methods, log) if "baselines" in stages else []
    heads = sorted(pick(rng, list(range(12)), args.block_heads))
    log(f"block transition {L} -> {L + 1}: {len(heads)} heads")
    t_block = block(cfg, arrays[L], arrays[L + 1], L, heads) if "block" in stages else 0.0
    log(f"block {t_block:.1f} s")
    mini = minip(cfg, args.minip_runs, rng, log) if "minip" in stages else []
    load_end = load()

    # ---- per-stratum statistics and extrapolation ----
    c_counts = {
        (md, qp): counts["certify_by_position"][qp][md]
        for qp in counts["certify_by_position"]
        for md in ("fixed", "varying")
    }
    strata = {"after": defaultdict(list), "before": defaultdict(list)}
    for r in cert:
        for k in strata:
            strata[k][(r["mode"], r["qp"])].append(r.get(k, math.nan))
    st = {k: {s: stats(v) for s, v in d.items()} for k, d in strata.items()}
    h_cert = {k: hours(st[k], c_counts) for k in st}
    b_counts = {"fixed": counts["baselines_fixed"], "varying": counts["baselines_varying"]}
    b_st = {m: {md: stats([r["seconds"] for r in base if r["method"] == m and r["mode"] == md and r["status"] == "ok"])
                for md in b_counts} for m in methods}  # a failed call returns early: its time says nothing
    h_base = {m: hours(b_st[m], b_counts) for m in methods}
    paper_methods = list(paper["baselines"]["methods"])
    h_block = t_block / len(heads) * counts["block"] / 3600
    m_counts = counts["minip_runs_by_setting"]
    m_st = {g: stats([r["seconds"] for r in mini if r["group"] == g]) for g in m_counts}
    h_minip_by = minip_hours(cfg, mini)
    h_minip = sum(h_minip_by.values())
    h_extract = t_extract / 3600
    total = {
        k: h_extract + h_cert[k] + sum(h_base[m] for m in paper_methods) + h_block + h_minip
        for k in ("after", "before")
    }
    # with --path after the legacy path is not measured: its hours are unknown (None), not an empty sample's 0.0
    measured_before = args.path != "after"
    if not measured_before:
        h_cert["before"] = total["before"] = None

    lines = [
        f"# Measured cost of paper.yaml on {model_label(cfg['model'])} (init std {cfg['model'].get('init_std', 0.02)}; "
        f"layer {L}; seed {args.seed}; "
        f"sample {args.sample or 'whole layer'}; path {args.path})",
        "",
        f"Machine load at start: {load_start}; at end: {load_end}. Times are inflated by that load.",
        "",
        "| stage | stratum | paper.yaml units | sampled | s/unit median | p90 | mean | CPU-h after | s/unit median "
        "before | CPU-h before |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| extraction | 1 job (model build + forward of 5 prompts; 2 of 12 layers stored) | 1 | 1 | {fmt(t_extract)} "
        f"| | | {fmt(h_extract)} | | {fmt(h_extract)} |",
    ]
    for s in sorted(c_counts, key=lambda s: (s[0], s[1])):
        if not c_counts[s]:
            continue
        a, b = st["after"].get(s, stats([])), st["before"].get(s, stats([]))
        lines.append(
            f"| certification | {s[0]} query, position {s[1]} (n = {s[1] + 1}) | {c_counts[s]:,} | {a['n'] or b['n']} "
            f"| {fmt(a['median'])} | {fmt(a['p90'])} | {fmt(a['mean'])} | {fmt(a['mean'] * c_counts[s] / 3600)} | "
            f"{fmt(b['median'])} | {fmt(b['mean'] * c_counts[s] / 3600)} |"
        )
    for m in methods:
        for md in b_counts:
            x = b_st[m][md]
            note = "" if m in paper_methods else " (not in paper.yaml)"
            lines.append(
                f"| baselines | {m}{note}, {md} | {b_counts[md]:,} | {x['n']} | {fmt(x['median'])} | {fmt(x['p90'])} | "
                f"{fmt(x['mean'])} | {fmt(x['mean'] * b_counts[md] / 3600)} | (not re-run) | |"
            )
    lines.append(
        f"| block | transition {L}->{L + 1}, {len(heads)} heads in one job | {counts['block']} | {len(heads)} | "
        f"{fmt(t_block / len(heads))} | | | {fmt(h_block)} | (not re-run) | |"
    )
    for g, n in m_counts.items():
        x = m_st[g]
        lines.append(
            f"| Min-IP | {g} (per run) | {n} | {x['n']} | {fmt(x['median'])} | {fmt(x['p90'])} | {fmt(x['mean'])} | "
            f"{fmt(h_minip_by.get(g, math.nan))} | (not re-run) | |"
        )
    lines += [
        "",
        f"Extrapolated CPU-hours of paper.yaml: after {total['after']:.1f} h"
        + (f", before {total['before']:.1f} h" if measured_before else "")
        + f" (certification {h_cert['after']:.2f} h"
        + (f" vs {h_cert['before']:.2f} h" if measured_before else "")
        + "; baselines "
        f"{sum(h_base[m] for m in paper_methods):.2f} h [{', '.join(f'{m} {h_base[m]:.2f}' for m in paper_methods)}]; "
        f"block {h_block:.2f} h; Min-IP {h_minip:.2f} h; extraction {h_extract:.3f} h). Ideal wall time on 2 cores: "
        f"{total['after'] / 2:.1f} h after" + (f", {total['before'] / 2:.1f} h before." if measured_before else "."),
        f"Longest single jobs (paper.yaml sharding: certification and baselines per layer, block per transition, "
        f"Min-IP per run): certification {h_cert['after'] / counts['certify_jobs']:.2f} h, baselines "
        f"{sum(h_base[m] for m in paper_methods) / counts['certify_jobs']:.2f} h, block "
        f"{t_block / len(heads) * 12 / 3600:.2f} h, "
        f"Min-IP {max([r['seconds'] for r in mini] or [math.nan]) / 3600:.3f} h (largest sampled run).",
    ]
    # certificate vs CROWN on the same units (the baseline units)
    by_unit = {r["unit"]: r for r in cert}
    lines += [
        "",
        "Certificate vs the baselines on the same units (the sampled baseline units; medians per unit; "
        "certificate = first + second order, the paper's; tight = the tight second-order variant the pipeline "
        "also computes; whole unit = everything certify_unit does, after):",
        "",
        "| mode | units | certificate | tight | whole unit | method | method s/unit | certificate / method | whole "
        "unit / method |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for md in b_counts:
        us = {r["unit"] for r in base if r["mode"] == md and r["unit"] in by_unit}
        cs, ts, whole = (stats([by_unit[u][k] for u in us]) for k in ("cert_s", "tight_s", "after"))
        for m in methods:
            x = stats([r["seconds"] for r in base if r["method"] == m and r["unit"] in us and r["status"] == "ok"])
            lines.append(
                f"| {md} | {cs['n']} | {fmt(cs['median'])} | {fmt(ts['median'])} | {fmt(whole['median'])} | {m} | "
                f"{fmt(x['median'])} | {fmt(cs['median'] / x['median'])} | {fmt(whole['median'] / x['median'])} |"
            )
    # the search: what the legacy ascent found compared with the exact witness / the warm-started ascent
    fx = [r for r in cert if r["mode"] == "fixed" and "legacy_value" in r]
    vy = [r for r in cert if r["mode"] == "varying" and "legacy_value" in r]
    if fx or vy:
        def rel(a, b, r):  # (a - b) / the movement b - nominal
            return (a - b) / max(b - r["row"]["nominal"], 1e-300)

        fs = [rel(r["row"]["exact_lo"], r["legacy_value"], r) for r in fx]
        vs = [rel(r["row"]["best_feasible"], r["legacy_value"], r) for r in vy]
        lines += [
            "",
            f"Search quality: fixed query, the reference path's cold ascent fell short of the exact witness by more "
            f"than 1e-9 "
            f"of the movement on {sum(v > 1e-9 for v in fs)}/{len(fx)} units (largest {max(fs, default=0):.1e}); "
            f"varying query, the warm-started ascent ended above the cold ascent by more than 1e-9 of the "
            f"movement on {sum(v > 1e-9 for v in vs)}/{len(vy)} units and below it on {sum(v < -1e-9 for v in vs)} "
            f"(largest shortfall {-min(vs + [0.0]):.1e} of the movement).",
        ]
    bad = defaultdict(int)
    for r in cert:
        if r["status"] not in ("ok", "fallback"):
            bad[("certification", r["mode"], str(r["status"])[:60])] += 1
    for r in base:
        if r["status"] != "ok":
            bad[(f"baselines {r['method']}", r["mode"], str(r["status"])[:60])] += 1
    lines += ["", f"Rows not ok: {sum(bad.values())} " + (str(dict(bad)) if bad else "") +
              f". Total bench wall time {time.perf_counter() - t_start:.0f} s."]
    print("\n".join(lines))
    return {"model": model_label(cfg["model"]), "layer": L, "sample": args.sample, "path": args.path,
            "hours": {"total_after": total["after"], "total_before": total["before"], "certify": h_cert,
                      "baselines": {m: h_base[m] for m in paper_methods}, "block": h_block, "minip": h_minip,
                      "extraction": h_extract}}


if __name__ == "__main__":
    parsed = common.parse(build_parser(), QUICK)
    common.run("paper_cost", main, parsed, parsed.part)
