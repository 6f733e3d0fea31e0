"""Paper vs reproduced: every claim of `data/paper_claims.yaml` beside ours, with its verdict.

Each stage writes `figures/tables/{model}/{stage}_measured.json` ({"grid": label, "values": {key: value}});
`load_measured` merges them (a key emitted by two files is an error), `comparison_table` joins them
with the claims (one row per claim, the verdict from `attncert.paper_comparison.verdict`, whose docstring
states the rule, including what a result on another model can be), and `to_markdown` renders the
table with its verdict counts, the grids that produced ours, the statements no measurement checks
and the papers' sentences.

The key `model` is reserved: it holds the run's model name (the `model` argument of
`comparison_table`), so that the setup claim `paper_a_model` compares it with the paper's model.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from attncert.paper_comparison.claims import Claim, Claims, load_claims
from attncert.paper_comparison.sentence_tally import beyond_table, sentence_table
from attncert.paper_comparison.table_legend import legend, part_words, rows_words
from attncert.paper_comparison.verdict import KINDS, REPRODUCED, verdict

#: measured files whose values come from random small heads, not from the run's model
MODEL_FREE_SOURCES = {"method_checks"}
COLUMNS = [
    "paper",
    "id",
    "claim",
    "paper value",
    "ours",
    "our model/grid",
    "verdict",
    "uncapped",
    "note",
    "tolerance",
    "why",
    "sentence",
    "english",
    "beyond",
]


def fmt(v) -> str:
    """Numbers to 3 significant digits; [lo, hi] as lo–hi; longer lists as a → b → c; {median, range}."""
    if v is None:
        return "—"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, dict):
        rng = v.get("range")
        return f"{fmt(v.get('median'))} ({fmt(rng)})" if rng else ", ".join(f"{k} {fmt(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ("–" if len(v) == 2 else " → ").join(fmt(x) for x in v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("∞" if math.isinf(v) else f"{v:.3g}")
    return str(v)


def claim_dicts(claims_file: str | Path, paper: str) -> list[dict]:
    """The validated claims of one paper ("paper_a" or "paper_b") as plain dicts (id, value, unit, ...),
    for the stage tables and figures that show the paper's number beside ours."""
    letter = {"paper_a": "A", "paper_b": "B"}[paper]
    return [dataclasses.asdict(c) for c in load_claims(claims_file).claims if c.paper == letter]


def fmt_paper(c: Claim) -> str:
    """The paper's number as the verdict reads it: ≤ x, > x, lo–hi, a < b, ..."""
    x = fmt(c.compared)
    if c.form == "at_most":
        return f"{'<' if c.strict else '≤'} {x}"
    if c.form == "at_least":
        return f"{'>' if c.strict else '≥'} {x}"
    if c.form == "ordered" and isinstance(c.value, list):
        return " < ".join(fmt(v) for v in c.value)
    return x


def fmt_tolerance(c: Claim) -> str:
    if c.form == "ordered" and c.tolerance is not None:
        return f"each step ×{c.tolerance[1]:g}"
    if c.form in ("holds", "ordered"):
        return "yes/no"
    if c.tolerance is None:
        return "exact"
    kind, t = c.tolerance
    return {"abs": f"± {t:g}", "rel": f"± {100 * t:g}%", "factor": f"×/÷ {t:g}"}[kind]


def md_table(df: pd.DataFrame) -> str:
    """A Markdown table with every cell's `|` escaped (|y − t| would otherwise split a cell)."""
    return df.astype(str).apply(lambda col: col.str.replace("|", "\\|", regex=False)).to_markdown(index=False)


def load_measured(paths) -> dict:
    """Merge the stages' measured JSON files: {key: {"value", "grid", "source"}}; a duplicate key is an error."""
    out = {}
    for p in paths:
        p = Path(p)
        rec = json.loads(p.read_text())
        if not isinstance(rec, dict) or not isinstance(rec.get("values"), dict) or "grid" not in rec:
            raise ValueError(f"{p}: a measured file needs {{'grid': ..., 'values': {{...}}}}")
        source = p.stem.removesuffix("_measured")
        for key, value in rec["values"].items():
            if key in out:
                raise ValueError(f"{p}: measured key {key!r} is also emitted by the {out[key]['source']} stage")
            out[key] = {"value": value, "grid": rec["grid"], "source": source}
    return out


def _ours(c: Claim, measured: dict):
    keys = c.measured if isinstance(c.measured, tuple) else (c.measured,)
    recs = [measured.get(k) for k in keys]
    values = [r["value"] if r else None for r in recs]
    sources = sorted({r["source"] for r in recs if r})
    return (values if c.form == "ordered" else values[0]), sources


def _setup_reason(c: Claim, setup_rows: dict) -> str | None:
    """Why the claim's set-up differs from the paper's (None when every depends_on setup claim reproduced)."""
    reasons = []
    for dep in c.depends_on:
        claim, ours, v = setup_rows[dep]
        if v.kind != REPRODUCED:
            reasons.append(f"set-up {dep}: ours {fmt(ours)}, paper {fmt(claim.value)}" if v.kind != "n/a"
                           else f"set-up {dep} not measured")
    return "; ".join(reasons) or None


def comparison_table(claims: str | Path | Claims, measured: dict, model: str) -> pd.DataFrame:
    """One row per claim (columns COLUMNS), Paper A then Paper B, in the file's order."""
    claims = claims if isinstance(claims, Claims) else load_claims(claims)
    measured = {**measured, "model": {"value": model, "grid": "workflow config", "source": "config"}}
    setup_rows = {}
    for c in claims.claims:
        if c.form == "setup":
            ours, _ = _ours(c, measured)
            setup_rows[c.id] = (c, ours, verdict(c, ours))
    rows = []
    for c in claims.claims:
        ours, sources = _ours(c, measured)
        v = setup_rows[c.id][2] if c.id in setup_rows else verdict(c, ours, _setup_reason(c, setup_rows))
        grids = ", ".join(f"{s} grid" for s in sources if s != "config")
        if c.paper == "A" and grids and set(sources) - {"config"} <= MODEL_FREE_SOURCES:
            where = f"random small heads (no model); {grids}"
        elif c.paper == "A" and grids:
            where = f"{model}; {grids}"
        else:
            where = grids or ("run config" if sources else "—")
        shown = ", ".join(fmt(x) for x in ours) if c.form == "ordered" else fmt(ours)
        rows.append(
            {
                "paper": c.paper,
                "id": c.id,
                "claim": c.unit,
                "paper value": fmt_paper(c),
                "ours": shown,
                "our model/grid": where,
                "verdict": v.kind,
                "uncapped": v.uncapped,
                "note": v.note,
                "tolerance": fmt_tolerance(c),
                "why": c.why,
                "sentence": c.sentence,
                "english": c.english,
                "beyond": c.beyond,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def verdict_counts(table: pd.DataFrame) -> dict[str, int]:
    """Rows per verdict kind, in the order of KINDS (zeros included)."""
    counts = table["verdict"].value_counts()
    return {k: int(counts.get(k, 0)) for k in KINDS}


def counts_line(table: pd.DataFrame) -> str:
    return ", ".join(f"{k} {n}" for k, n in verdict_counts(table).items())


def grids(measured: dict) -> dict[str, str]:
    """{stage: grid label} of the measured files."""
    return {r["source"]: r["grid"] for r in measured.values() if r.get("source") not in (None, "config")}


def to_markdown(table: pd.DataFrame, claims: Claims, measured: dict, model: str) -> str:
    capped = int((table["uncapped"] != table["verdict"]).sum())
    sentences, beyond = sentence_table(table), beyond_table(table)
    out = [f"# Paper vs reproduced — our model: {model}\n",
           f"Paper A's numbers come from {claims.models['A']}, Paper B's from {claims.models['B']} on the "
           f"authors' suites; ours from this run (model **{model}**; the grid of every row is listed below). "
           "Verdicts and their rule: `attncert.paper_comparison.verdict`; tolerances, directions and reasons: "
           "`data/paper_claims.yaml`. A result on another model or suite than the claim's is at best "
           "`qualitative` for a magnitude of the paper's set-up; the `note` column gives the uncapped verdict.\n",
           f"**Verdicts, one per sentence of the papers ({len(sentences)} sentences holding "
           f"{len(table) - len(beyond)} claims, each sentence judged by its least favourable claim; "
           "`attncert.paper_comparison.sentence_tally`):"
           f"** {counts_line(sentences)}. Beyond the paper ({len(beyond)} variants, tallied apart): "
           f"{counts_line(beyond)}.\n",
           f"**Verdicts per row ({rows_words(table)}):** {counts_line(table)}. Capped at qualitative by a set-up or "
           f"metric difference: {capped}.\n"]
    for paper in ("A", "B"):
        part = table[table["paper"] == paper]
        shown = part.drop(columns=["paper", "uncapped", "sentence", "english", "beyond"])
        out += [f"## Paper {paper} ({claims.models[paper]}) — {part_words(part)}\n",
                f"Per row: {counts_line(part)}. Per sentence: {counts_line(sentence_table(part))}.\n",
                md_table(shown), "", legend(shown.columns)]
    out += ["## Grids that produced ours\n"] + [f"- **{s}**: {g}" for s, g in sorted(grids(measured).items())]
    for paper in ("A", "B"):
        out += [f"\n## Paper {paper}: statements no measurement checks\n"]
        out += [f"- {x['sentence']} ({x['english']}) — {x['reason']}" for x in claims.not_checked.get(paper, [])] \
            or ["- (none)"]
    out += ["\n## Sentences (the papers' summaries quoted in Korean, in English beside them)\n"]
    out += [f"- **{r.claims}** ({r.verdict}): {r.sentence} — *{r.english}*" for r in sentences.itertuples()]
    out += [f"- **{r.id}** (beyond the paper, {r.verdict}): judged against {r.sentence} — *{r.english}*"
            for r in beyond.itertuples()]
    return "\n".join(out) + "\n"


def measured_record(values: dict, grid: str) -> dict:
    """A stage's measured values as stored: {"grid": label, "values": {key: value}} (non-finite floats -> null)."""
    clean = {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in values.items()}
    return {"grid": grid, "values": clean}


def write_measured(path: str | Path, values: dict, grid: str) -> None:
    """A stage's measured values (`measured_record`) as JSON."""
    from attncert.integrity.file_integrity import write_json

    write_json(path, measured_record(values, grid))
