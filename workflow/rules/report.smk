# Final stage: every claim of both papers beside ours with its verdict (figures/tables/{model}/paper_vs_reproduced.md,
# under the model like every result, so a run on another model never rewrites it); the .json is the snapshot `python -m attncert.paper_comparison.readme_results` turns into the README's tally and docs/results.md.
#
# Then `snakemake --report report.html` (after a run) is the front page of the run. Its landing page is
# workflow/report/workflow.rst with the run's overview (run_overview: model, configuration and grid, job times,
# the verdict and audit tallies, read from the run's files); then every figure and every summary table (each table
# rendered as an HTML page by report_table, since the report shows only HTML inline), grouped by stage in the
# categories of attncert.reporting.report_index.
import os

from attncert.reporting.report_index import OVERVIEW, OVERVIEW_FIRST, REPORT_TABLES, report_tables, table_source


report: "../report/workflow.rst"


PAPER_VS_REPRODUCED = f"figures/tables/{MODEL}/paper_vs_reproduced.md"
REPORT_TABLE_NAMES = report_tables(block=bool(BLOCK_TRANSITIONS), long_context=bool(LC))
RUN_OVERVIEW = f"figures/tables/{MODEL}/run_overview.md"
REPORT_OUTPUTS = [PAPER_VS_REPRODUCED, RUN_OVERVIEW] + [f"figures/report/{MODEL}/{n}.html" for n in REPORT_TABLE_NAMES]


# every benchmarked job of the run (rule, wildcard values): the overview sums their wall times per stage
_BENCHMARKED = (
    [("extract", {"model": MODEL, "layer": LAYERS}), ("certify_layer", {"model": MODEL, "layer": LAYERS}),
     ("certify_method_checks", {"model": MODEL}), ("baselines_layer", {"model": MODEL, "layer": LAYERS})]
    + ([("block_transition", {"model": MODEL, "transition": BLOCK_TRANSITIONS}), ("block_merge", {"model": MODEL}),
        ("block_table", {"model": MODEL}), ("block_figure", {"model": MODEL, "block_figure": _BLOCK_FIGURE_NAMES})]
       if BLOCK_TRANSITIONS else [])
    + ([("long_context_extract", {"model": MODEL}), ("long_context_merge", {"model": MODEL})] if LC else [])
    + [(rule, {"model": MODEL}) for rule in ("run_configuration", "audit_certificates_merge", "audit")]
    + [("audit_certificates", {"model": MODEL, "audit_part": AUDIT_CERTIFICATE_PARTS})]
    + [(rule, {"grid": MINIP_NAME}) for rule in ("minip_witness_bound", "minip_constructions", "minip_collect",
                                                  "minip_measured")]
    + [("minip_figure", {"grid": MINIP_NAME, "minip_figure": list(_MINIP_FIGURE_NAMES)}),
       ("minip_table", {"grid": MINIP_NAME, "table": MINIP_TABLES})]
)
_LC_PARTS = _lc_part_keys(LC.get("lengths", []), LC.get("heads", [])) if LC else []
RUN_BENCHMARKS = [b for rule, values in _BENCHMARKED for b in expand(getattr(rules, rule).benchmark, **values)]
RUN_BENCHMARKS += expand(rules.long_context_certify.benchmark, zip, model=[MODEL] * len(_LC_PARTS),
                         lengths=[_lc_group_label(g) for g, _ in _LC_PARTS], head=[h for _, h in _LC_PARTS])
RUN_BENCHMARKS += [f"benchmarks/minip/{MINIP_NAME}/train/{setting}/{p.part}.tsv"  # rules minip_train_*
                   for p in MINIP_TRAIN_PARTS for setting in p.settings]
# the configuration files Snakemake read (relative to the working directory where they lie under it)
CONFIG_FILES = list(dict.fromkeys(
    os.path.relpath(f) if not os.path.relpath(f).startswith("..") else str(f) for f in workflow.configfiles))


# small jobs (seconds): on a cluster they run on the submitting host, not through the scheduler
localrules: paper_vs_reproduced, report_table, run_overview


rule paper_vs_reproduced:
    input:
        claims="data/paper_claims.yaml",
        measured=MEASURED_FILES,
    output:
        md="figures/tables/{model}/paper_vs_reproduced.md",
        csv="figures/tables/{model}/paper_vs_reproduced.csv",
        snapshot="figures/tables/{model}/paper_vs_reproduced.json",
    params:
        model=MODEL_CFG,
        code=code("paper_vs_reproduced.py"),
    threads: 1
    priority: priority_of("paper_vs_reproduced")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/paper_vs_reproduced.log",
    script:
        "../scripts/paper_vs_reproduced.py"


rule report_table:
    input:
        table=lambda wc: table_source(wc.page, wc.model, MINIP_NAME),
    output:
        html=report("figures/report/{model}/{page}.html", caption="../report/tables.rst",
                    category=lambda wc: REPORT_TABLES[wc.page].category,
                    subcategory=lambda wc: REPORT_TABLES[wc.page].subcategory,
                    labels=lambda wc: {"table": wc.page.replace("_", " ")}),
    wildcard_constraints:
        page="|".join(REPORT_TABLES),
    params:
        model=MODEL_CFG,
        about=lambda wc: REPORT_TABLES[wc.page].about,
        code=code("report_table.py"),
    threads: 1
    priority: priority_of("report_table")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=500,
        runtime=2,
    log:
        "data/logs/{model}/report/table_{page}.log",
    script:
        "../scripts/report_table.py"


rule run_overview:
    input:
        config="data/run/{model}/config.yaml",
        benchmarks=RUN_BENCHMARKS,
        verdicts="figures/tables/{model}/paper_vs_reproduced.csv",
        audit="figures/tables/{model}/audit.csv",
    output:
        md="figures/tables/{model}/run_overview.md",
        html=report("figures/report/{model}/run_overview.html", caption="../report/run_overview.rst",
                    category=OVERVIEW, subcategory=OVERVIEW_FIRST, labels={"page": "run overview"}),
    params:
        model=MODEL_CFG,
        configfiles=CONFIG_FILES,
        overrides=dict(workflow.config_settings.config),
        code=code("run_overview.py"),
    threads: 1
    priority: priority_of("run_overview")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/report/run_overview.log",
    script:
        "../scripts/run_overview.py"
