"""What `snakemake --report` shows, and where: the report's categories (one per stage, numbered in pipeline order,
since the report lists them alphabetically) and every summary table it renders as a page of its own.

Light on purpose (no pandas, no matplotlib): the workflow imports it while parsing (workflow/rules/report.smk), and
every cluster job parses the workflow again.

A category name carries no colon: Snakemake turns every category into a reST link target, and a colon ends one.
"""
from __future__ import annotations

from typing import NamedTuple

OVERVIEW = "0 Overview of the run"
CERTIFY = "1 Paper A, certification"
BASELINES = "2 Paper A, baselines"
BLOCK = "3 Paper A, block residual"
LONG_CONTEXT = "4 Paper A, long context (beyond the paper)"
MINIP = "5 Paper B, Min-IP"
CATEGORIES = (OVERVIEW, CERTIFY, BASELINES, BLOCK, LONG_CONTEXT, MINIP)
FIGURES, TABLES = "Figures", "Tables"  # the subcategories of a stage
OVERVIEW_FIRST = "1 Run overview"  # the first item of the overview's category, then paper vs reproduced, the audit


class ReportTable(NamedTuple):
    """One summary table in the report: the file it is rendered from (`{model}` where the model's name goes, `{grid}`
    the Min-IP grid's), its category and subcategory, and one sentence on what it holds (the page's lead and the
    report's caption)."""

    source: str
    category: str
    subcategory: str
    about: str


def _model_table(name: str, category: str, about: str, ext: str = "md", subcategory: str = TABLES) -> ReportTable:
    return ReportTable(f"figures/tables/{{model}}/{name}.{ext}", category, subcategory, about)


def _minip_table(name: str, about: str) -> ReportTable:
    return ReportTable(f"figures/tables/minip/{{grid}}/{name}.md", MINIP, TABLES, about)


#: page name (= file name under figures/report/{model}/, without .html) -> the table it renders. A CSV without a
#: Markdown twin among the rules' outputs is rendered from the CSV; every other table from its Markdown.
REPORT_TABLES = {
    "paper_vs_reproduced": _model_table(
        "paper_vs_reproduced", OVERVIEW, "Every claim of both papers beside our number, with its tolerance and "
        "verdict.", subcategory="2 Paper vs reproduced"),
    "audit": _model_table(
        "audit", OVERVIEW, "The audit: every certified number re-derived from its certificate and the weights, "
        "every summary table recomputed; counts per part, failures and time.", subcategory="3 Audit"),
    "certification": _model_table(
        "certification", CERTIFY, "Certification per query mode and radius: relative gaps of the certificates, "
        "shares within 10% and 1% of the movement, timings."),
    "certification_vs_paper": _model_table(
        "certification_vs_paper", CERTIFY, "Paper A's certification numbers (GPT-2 small) beside ours.", "csv"),
    "certification_slopes": _model_table(
        "certification_slopes", CERTIFY, "Median per-unit log-log slopes of the gaps and of the movement range "
        "over the small radii.", "csv"),
    "soundness_violations": _model_table(
        "soundness_violations", CERTIFY, "Every unit whose certificate lies below an attained value (must be "
        "empty).", "csv"),
    "baselines": _model_table(
        "baselines", BASELINES, "IBP, CROWN and α-CROWN against the second-order certificate on the same units, "
        "per mode, radius and method."),
    "baselines_headline": _model_table(
        "baselines_headline", BASELINES, "Per method: the share of units where the certificate is tighter (and "
        "twice as tight), and seconds per unit beside the certificate's.", "csv"),
    "baselines_slopes": _model_table(
        "baselines_slopes", BASELINES, "Median per-unit log-log slopes of the baselines' gaps beside the "
        "certificate's, with the paper's.", "csv"),
    "block_summary": _model_table(
        "block_summary", BLOCK, "Block residual per radius: second-order regime, CROWN over the per-operation "
        "sum, rank correlations."),
    "block_vs_paper": _model_table(
        "block_vs_paper", BLOCK, "Paper A's block residual numbers (GPT-2 small) beside ours."),
    "block_certificate": _model_table(
        "block_certificate", BLOCK, "The block certificate (beyond the paper) against CROWN and α-CROWN per "
        "radius."),
    "long_context": _model_table(
        "long_context", LONG_CONTEXT, "Gaps and seconds of the certificates per number of attended keys, both "
        "query modes."),
    "minip_witness": _minip_table("minip_witness", "Witness suite: error per feature rank, with the proven "
                                  "rank bound."),
    "minip_witness_maxerr": _minip_table("minip_witness_maxerr", "Witness suite: the largest absolute error "
                                         "per feature rank (the paper's metric)."),
    "minip_transition": _minip_table("minip_transition", "Transition rank per problem size, kernel against "
                                     "dense attention."),
    "minip_thresholds": _minip_table("minip_thresholds", "Transition rank under each error criterion."),
    "minip_paper": _minip_table("minip_paper", "Paper B's numbers beside ours."),
    "minip_constructions": _minip_table("minip_constructions", "The constructions, checked exhaustively over "
                                        "every sequence."),
}
#: the stages whose tables exist only when the configuration has the stage
OPTIONAL = {"block": BLOCK, "long_context": LONG_CONTEXT}


def report_tables(block: bool = True, long_context: bool = True) -> list[str]:
    """The page names of a run's tables: every table, less those of a stage the run does not have."""
    skip = {c for stage, c in OPTIONAL.items() if not {"block": block, "long_context": long_context}[stage]}
    return [name for name, t in REPORT_TABLES.items() if t.category not in skip]


def table_source(name: str, model: str, grid: str) -> str:
    """The file the page `name` is rendered from, in the run of `model` and the Min-IP grid `grid`."""
    return REPORT_TABLES[name].source.format(model=model, grid=grid)
