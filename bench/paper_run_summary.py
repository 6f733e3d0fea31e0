"""Summary of a complete (or partial) pipeline run: per stage the units, CPU-hours and wall time, beside the
extrapolation of `bench.paper_cost`, with soundness violations, fallbacks by reason, lost units and failed jobs.

    .venv/bin/python -m bench.paper_run_summary RUN_DIR --configfile workflow/config/paper.yaml random_gpt2.yaml \
        [--extrapolation bench/results/paper_cost.json] [--results DIR]

RUN_DIR is the working directory of the run (its data/, benchmarks/, figures/ and .snakemake/log/); the config
files are the ones the run used (merged into default.yaml in order, as `snakemake --configfile A B` does). Per
stage: jobs and their summed wall and CPU seconds (Snakemake `benchmark:` files), units present against the
units the config defines (`bench.paper_units.unit_counts`), and the stage's CPU-hours from `bench.paper_cost`
(`--extrapolation`, its JSON result) when given. A model built from random weights (`random-gpt2`) is labelled
synthetic everywhere: its numbers are costs, never GPT-2 results.
"""
from __future__ import annotations

import argparse
import csv
import json
import re
from collections import Counter
from pathlib import Path

import yaml
from snakemake.utils import update_config

from bench import common
from bench.paper_units import unit_counts
from attncert.configuration.config import validate_config
from attncert.model.model_source import is_synthetic

QUICK: dict = {}  # it reads a finished run: nothing to make smaller
STAGES = ("extract", "certify", "baselines", "block", "minip", "long_context", "audit", "method_checks")


def merged_config(paths: list[str]) -> dict:
    """The run's config as Snakemake builds it: workflow/config/default.yaml (the Snakefile's `configfile:`),
    then the files in order, merged by Snakemake's own `update_config`, then validated."""
    cfg: dict = {}
    for p in [common.REPO / "workflow" / "config" / "default.yaml", *paths]:
        update_config(cfg, yaml.safe_load(Path(p).read_text()) or {})
    return validate_config(cfg, base_dir=common.REPO)


def benchmark_times(run: Path, model: str, grid: str) -> dict:
    """stage -> {jobs, wall_s, cpu_s, longest_s} from every `benchmark:` file of the run: the model's
    (benchmarks/MODEL/) and its Min-IP grid's (benchmarks/minip/GRID/)."""
    out = {s: {"jobs": 0, "wall_s": 0.0, "cpu_s": 0.0, "longest_s": 0.0} for s in STAGES}
    for tsv in sorted((run / "benchmarks").rglob("*.tsv")):
        rel = tsv.relative_to(run / "benchmarks").parts
        rel = rel[1:] if rel[0] == model else rel
        stage = rel[0].removesuffix(".tsv")
        if stage not in out or (stage == "minip" and rel[1:2] != (grid,)):  # another grid's Min-IP jobs
            continue
        with open(tsv, newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                rec = out[stage]
                rec["jobs"] += 1
                rec["wall_s"] += float(row["s"])
                rec["cpu_s"] += float(row.get("cpu_time") or 0.0)
                rec["longest_s"] = max(rec["longest_s"], float(row["s"]))
    return out


def rows_of(paths) -> list[dict]:
    out = []
    for p in sorted(paths):
        with open(p, newline="") as fh:
            out += list(csv.DictReader(fh))
    return out


def failed_jobs(run: Path) -> list[str]:
    """The rules that failed in the run's Snakemake logs ("Error in rule X")."""
    found = []
    for log in sorted((run / ".snakemake" / "log").glob("*.snakemake.log")):
        found += re.findall(r"Error in rule (\w+)", log.read_text(errors="replace"))
    return found


def summarize(run: Path, cfg: dict, extrapolation: dict | None) -> tuple[dict, list[str]]:
    model = cfg["model"]["name"]
    counts = unit_counts(cfg)
    times = benchmark_times(run, model, cfg["minip"]["name"])
    cert = rows_of((run / "data" / "certify" / model).glob("layer*.csv"))
    base = rows_of((run / "data" / "baselines" / model).glob("layer*.csv"))
    block = rows_of([p for p in [run / "data" / "block" / model / "units.csv"] if p.is_file()])
    minip_runs = len(
        [p for p in (run / "data" / "minip" / cfg["minip"]["name"] / "runs").glob("*/*.json")
         if not p.name.endswith(".json.json")]
    )
    expected = {"certify": counts["certify_fixed"] + counts["certify_varying"], "baselines": counts["baselines_rows"],
                "block": counts["block"] * counts["block_radii"], "minip": counts["minip_runs"], "extract": 1}
    present = {"certify": len(cert), "baselines": len(base), "block": len(block), "minip": minip_runs,
               "extract": int((run / "data" / "extract" / model).is_dir())}
    hours = (extrapolation or {}).get("hours", {})
    extra = {
        "certify": (hours.get("certify") or {}).get("after"),
        "baselines": sum((hours.get("baselines") or {}).values()) if hours.get("baselines") else None,
        "block": hours.get("block"),
        "minip": hours.get("minip"),
        "extract": hours.get("extraction"),
    }
    unsound = [r for r in cert if r.get("status") == "UNSOUND"]
    fallbacks = Counter(
        re.sub(r"\(.*", "", r.get("error", "")).strip()[:90] for r in cert if r.get("status") == "fallback"
    )
    errors = Counter(re.sub(r"\(.*", "", r.get("error", "")).strip()[:90] for r in cert if r.get("status") == "error")
    base_bad = Counter(
        (r.get("method"), str(r.get("status"))[:60]) for r in base if r.get("status") not in ("ok", None)
    )
    audit = rows_of([p for p in [run / "figures" / "tables" / model / "audit.csv"] if p.is_file()])
    audit_counts = Counter(r["status"] for r in audit)
    failed = failed_jobs(run)
    synthetic = " (SYNTHETIC weights: costs, not GPT-2 results)" if is_synthetic(cfg["model"]) else ""
    lines = [f"# The run of {model}{synthetic}", "",
             "| stage | units present / defined | lost | jobs | wall (sum of jobs) | CPU-hours | longest job | "
             "paper_cost extrapolation (CPU-h) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in STAGES:
        t = times[s]
        units = f"{present[s]:,} / {expected[s]:,}" if s in expected else ""
        lost = f"{max(expected[s] - present[s], 0):,}" if s in expected else ""
        ext = f"{extra[s]:.2f}" if extra.get(s) is not None else ""
        lines.append(f"| {s} | {units} | {lost} | {t['jobs']} | {t['wall_s'] / 3600:.2f} h | {t['cpu_s'] / 3600:.2f} | "
                     f"{t['longest_s']:.0f} s | {ext} |")
    total_cpu = sum(t["cpu_s"] for t in times.values()) / 3600
    total_wall = sum(t["wall_s"] for t in times.values()) / 3600
    ext_total = hours.get("total_after")
    lines += ["", f"Summed job time {total_wall:.2f} h, CPU {total_cpu:.2f} h"
              + (f"; paper_cost extrapolated {ext_total:.2f} CPU-h ({total_cpu / ext_total:.2f}x)" if ext_total else "")
              + ".",
              f"Soundness violations (certification rows UNSOUND): {len(unsound)}. "
              f"Audit: {dict(audit_counts) if audit else 'not run'}.",
              f"Fallbacks by reason: {dict(fallbacks) or 'none'}. Errors: {dict(errors) or 'none'}. "
              f"Baseline rows not ok: {dict(base_bad) or 'none'}.",
              f"Failed jobs: {len(failed)}" + (f" ({dict(Counter(failed))})" if failed else "") + "."]
    print("\n".join(lines))
    result = {"model": model, "synthetic": bool(synthetic), "times": times, "expected": expected, "present": present,
              "unsound": len(unsound), "fallbacks": dict(fallbacks), "errors": dict(errors),
              "baseline_rows_not_ok": {f"{m}: {s}": n for (m, s), n in base_bad.items()},
              "audit": dict(audit_counts), "failed_jobs": failed, "cpu_hours": total_cpu,
              "extrapolated_cpu_hours": ext_total}
    return result, lines


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="the run's working directory")
    ap.add_argument("--configfile", nargs="+", default=[],
                    help="the --configfile files the run used, in order (none: default.yaml alone)")
    ap.add_argument("--extrapolation", help="bench.paper_cost's JSON result (bench/results/paper_cost.json)")
    return ap


def main(args) -> dict:
    cfg = merged_config(args.configfile)
    extrapolation = json.loads(Path(args.extrapolation).read_text())["result"] if args.extrapolation else None
    return summarize(Path(args.run), cfg, extrapolation)[0]


if __name__ == "__main__":
    common.run("paper_run_summary", main, common.parse(build_parser(), QUICK))
