"""Measured seconds per job of every rule of a finished run, and the priority each rule's jobs get from them.

    .venv/bin/python -m bench.job_seconds [RUN_DIR] [--model all-MiniLM-L6-v2] [--write]

Reads the run's benchmark files (`RUN_DIR/benchmarks/{model}/**/*.tsv`, `RUN_DIR/benchmarks/minip/{grid}/**/*.tsv`,
first column `s`: a job's wall seconds) and the default configuration's rule graph (`snakemake --rulegraph`, run in
this repository), and gives every rule

    seconds(rule)   = the longest measured job of the rule, in wall seconds `s` (one-thread jobs: on an idle
                      machine their CPU seconds); a rule without benchmark files: `DEFAULT_SECONDS`, except the
                      two below,
    priority(rule)  = round(seconds(rule) + max over the rules that read its outputs of priority-seconds(next)),

i.e. the seconds of the longest chain of jobs from one of the rule's jobs to the end of the run. Snakemake starts
the ready job of the highest priority first, so the jobs that head the longest remaining chains (the certification
chains, the long-context parts, the audit's pieces) start before short jobs at the end of the DAG. A run made before
the long-context and audit jobs were split has no benchmark file of their parts; their seconds then come from the
run's own records: `long_context_certify` from units.csv (the longest (length, head) part's sum of the per-unit
seconds columns t_*), `audit_certificates` from the certificate records' sidecar (`stage_seconds`: the longest of
a layer's share, the long-context and the block table), both wall seconds.

Not the benchmark's `cpu_time`: Snakemake samples a job's CPU seconds every 0.5 s for its first 15 s and then every
30 s, so a job of 15-45 s is recorded at about 15 CPU seconds (a 32.6 s baselines job with 32 s of CPU: 15.1). Take
the seconds from a run on an idle machine.

`--write` writes `workflow/config/job_seconds.yaml` (read by workflow/rules/common.smk) and
bench/results/job_seconds.md and .json. Absolute seconds depend on the machine's load; the priorities only order
the jobs, so a run on a loaded machine still ranks them (regenerate after a change of the DAG or of a stage's cost).
--quick changes nothing (it reads files).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from attncert.integrity.intermediate_check import RULE_FAMILIES as _FAMILIES
from bench import common

REPO = common.REPO
OUT = REPO / "workflow" / "config" / "job_seconds.yaml"
#: seconds of a rule the run did not benchmark (tables, figures, reports: seconds each)
DEFAULT_SECONDS = 5.0
#: benchmark file (relative to benchmarks/) -> the rule that wrote it (workflow/rules/*.smk `benchmark:`)
BENCHMARK_RULES = (
    (r"[^/]+/extract/layer\d+\.tsv", "extract"),
    (r"[^/]+/certify/layer\d+\.tsv", "certify_layer"),
    (r"[^/]+/method_checks\.tsv", "certify_method_checks"),
    (r"[^/]+/baselines/layer\d+\.tsv", "baselines_layer"),
    (r"[^/]+/block/transition\d+\.tsv", "block_transition"),
    (r"[^/]+/block/merge\.tsv", "block_merge"),
    (r"[^/]+/block/table\.tsv", "block_table"),
    (r"[^/]+/block/figure_\w+\.tsv", "block_figure"),
    (r"[^/]+/long_context/extract\.tsv", "long_context_extract"),
    (r"[^/]+/long_context/certify_lengths\d+(-\d+)*_head\d+\.tsv", "long_context_certify"),
    (r"[^/]+/long_context/merge\.tsv", "long_context_merge"),
    (r"[^/]+/run_configuration\.tsv", "run_configuration"),
    (r"[^/]+/audit/certificates_\w+\.tsv", "audit_certificates"),
    (r"[^/]+/audit/certificates_merge\.tsv", "audit_certificates_merge"),
    (r"[^/]+/audit\.tsv", "audit"),
    (r"minip/[^/]+/witness_bound\.tsv", "minip_witness_bound"),
    (r"minip/[^/]+/constructions\.tsv", "minip_constructions"),
    (r"minip/[^/]+/train/[^/]+/[^/]+\.tsv", "minip_train"),
    (r"minip/[^/]+/collect\.tsv", "minip_collect"),
    (r"minip/[^/]+/figure_\w+\.tsv", "minip_figure"),
    (r"minip/[^/]+/table_\w+\.tsv", "minip_table"),
    (r"minip/[^/]+/measured\.tsv", "minip_measured"),
)


# Rules generated one per group of jobs (`intermediate_check.RULE_FAMILIES`; workflow/rules/minip.smk:
# minip_train_{family}_{part}, which groups depend on the config): one cost entry, under the family's name.
RULE_FAMILIES = tuple((rf"{family}_\w+", family) for family in sorted(_FAMILIES))


def rule_family(name: str) -> str:
    """The name a rule's cost is listed under: its family's for a generated rule (`RULE_FAMILIES`), else its own."""
    for pattern, family in RULE_FAMILIES:
        if re.fullmatch(pattern, name):
            return family
    return name


def rule_of(relative: str) -> str | None:
    """The rule whose benchmark file is `relative` (a path under benchmarks/), None for an unknown file. The
    last matching pattern wins (certificates_merge is also a certificates_ name)."""
    found = None
    for pattern, rule in BENCHMARK_RULES:
        if re.fullmatch(pattern, relative):
            found = rule
    return found


def measured_seconds(run: Path, model: str) -> dict[str, float]:
    """{rule: its longest measured job's wall seconds} from the run's benchmark files."""
    out: dict[str, float] = {}
    base = run / "benchmarks"
    for tsv in sorted(base.rglob("*.tsv")):
        relative = tsv.relative_to(base).as_posix()
        if not (relative.startswith(f"{model}/") or relative.startswith("minip/")):
            continue
        rule = rule_of(relative)
        if rule is None:
            continue
        out[rule] = max(out.get(rule, 0.0), job_seconds(tsv))
    return out


def job_seconds(tsv: Path) -> float:
    """A benchmark file's job seconds: its wall seconds `s` (see the module docstring for why not `cpu_time`)."""
    return float(pd.read_csv(tsv, sep="\t").iloc[-1]["s"])


def recorded_seconds(run: Path, model: str) -> dict[str, float]:
    """Seconds of the long-context and audit pieces from a run's own records (for a run made before they were jobs
    of their own; see the module docstring)."""
    out: dict[str, float] = {}
    units = run / "data" / "long_context" / model / "units.csv"
    if units.is_file():
        df = pd.read_csv(units)
        per_unit = df[[c for c in df.columns if c.startswith("t_")]].fillna(0).sum(axis=1)
        out["long_context_certify"] = float(per_unit.groupby([df["length"], df["head"]]).sum().max())
    side = run / "data" / "audit" / model / "certificate_records.csv.json"
    if side.is_file():
        stages = json.loads(side.read_text()).get("stage_seconds", {})
        layers = len(list((run / "data" / "certify" / model).glob("layer*_certificates.npz"))) or 1
        pieces = [stages.get("certification tables", 0.0) / layers, stages.get("long-context table", 0.0),
                  stages.get("block table", 0.0)]
        out["audit_certificates"] = max(pieces)
    return out


def rule_graph(configfile: str | None = None) -> tuple[list[str], dict[str, set[str]]]:
    """(rules, {rule: the rules that read its outputs}) of the configuration's DAG (`snakemake --rulegraph`),
    generated rules under their family's name (`rule_family`)."""
    cmd = [str(Path(sys.executable).with_name("snakemake")), "--rulegraph", "--forceall", "--cores", "1"]
    if configfile:
        cmd += ["--configfile", configfile]
    dot = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True).stdout
    names = {k: rule_family(v) for k, v in re.findall(r"^\s*(\d+)\[label = \"(\w+)\"", dot, re.M)}
    after: dict[str, set[str]] = {name: set() for name in names.values()}
    for a, b in re.findall(r"^\s*(\d+) -> (\d+)", dot, re.M):
        after[names[a]].add(names[b])
    return sorted(after), after


def priorities(seconds: dict[str, float], after: dict[str, set[str]]) -> dict[str, float]:
    """{rule: seconds of the longest chain from one of its jobs to the end of the run} (`seconds` per job)."""
    memo: dict[str, float] = {}

    def chain(rule: str) -> float:
        if rule not in memo:
            memo[rule] = seconds[rule] + max((chain(r) for r in after[rule]), default=0.0)
        return memo[rule]

    return {rule: chain(rule) for rule in after}


QUICK: dict = {}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", default=".", help="the run's working folder (benchmarks/ and data/ in it)")
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--configfile", help="the configuration whose rule graph is ranked (default: the default one)")
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(REPO)} and the result files")
    return ap


def main(args) -> dict:
    run = Path(args.run)
    measured = measured_seconds(run, args.model)
    if not measured:
        raise SystemExit(f"job_seconds: no benchmark file under {run / 'benchmarks' / args.model}; fix: name a "
                         "finished run's folder")
    recorded = {k: v for k, v in recorded_seconds(run, args.model).items() if k not in measured}
    rules, after = rule_graph(args.configfile)
    seconds = {r: measured.get(r, recorded.get(r, DEFAULT_SECONDS)) for r in rules}
    chain = priorities(seconds, after)
    source = {r: "benchmark" if r in measured else "records" if r in recorded else "default" for r in rules}
    print("| rule | seconds per job (longest) | from | priority (longest chain to the end, s) |")
    print("| --- | ---: | --- | ---: |")
    for r in sorted(rules, key=lambda r: -chain[r]):
        print(f"| {r} | {seconds[r]:.1f} | {source[r]} | {round(chain[r])} |")
    table = {r: {"seconds": round(seconds[r], 1), "priority": int(round(chain[r]))} for r in sorted(rules)}
    if args.write:
        header = ("# Generated by `python -m bench.job_seconds RUN_DIR --write` (bench/README.md) from a finished\n"
                  "# run's benchmark files; do not edit. seconds: the rule's longest measured job (wall s); priority:\n"
                  "# the seconds of the longest chain of jobs from one of its jobs to the end of the run\n"
                  "# (workflow/rules/common.smk).\n")
        OUT.write_text(header + yaml.safe_dump({"model": args.model, "rules": table}, sort_keys=False))
        print(f"wrote {OUT.relative_to(REPO)}", file=sys.stderr)
    return {"model": args.model, "rules": table, "source": source}


if __name__ == "__main__":
    _args = common.parse(build_parser(), QUICK)
    common.run("job_seconds", main, _args) if _args.write else main(_args)
