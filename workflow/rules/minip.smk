# Paper B (Min-IP): constructions checked exhaustively, the witness family and its proven rank bound,
# training jobs (each: a group of a setting's models, every seed), then tables (figures/tables/minip/{grid}/minip_*) and
# figures (figures/minip/{grid}/*). Everything is model-independent (no transformer weights are read): the paths
# carry the grid's name `minip.name` ({grid}) instead of the model's, so two grids never share a file.
from attncert.minip.sweep import (data_dir as _minip_data_dir, runs as _minip_runs, run_params as _minip_run_params,
                                  table_inputs as _minip_table_inputs, train_parts as _minip_train_parts)
from attncert.minip.codes import hadamard as _minip_hadamard
from attncert.minip.figure_names import FIGURES as _MINIP_FIGURE_NAMES

MINIP = config["minip"]
try:
    _minip_hadamard(MINIP["witness"]["bits"])
    if not 2 <= MINIP["witness"]["queries"] <= MINIP["witness"]["bits"] - 1:
        raise ValueError(f"queries must be in 2..{MINIP['witness']['bits'] - 1}")
except ValueError as _e:
    raise SystemExit(f"attncert: config key 'minip.witness': {_e}; fix: use bits in [8, 12, 16, 20, 24, 32, 44, 48] and 2 <= queries < bits")

MINIP_NAME = MINIP["name"]
MINIP_RUNS = [f"{_minip_data_dir(MINIP_NAME)}/{r.path}" for r in _minip_runs(MINIP)]
MINIP_TRAIN_PARTS = _minip_train_parts(MINIP)  # the training jobs' groups of models (rule minip_train_*)
MINIP_THRESHOLD = MINIP["scaling"]["threshold"]
MINIP_REPORT_THRESHOLDS = MINIP["scaling"]["report_thresholds"]
MINIP_FIGURES = [f"figures/minip/{MINIP_NAME}/{name}" for name in _MINIP_FIGURE_NAMES]
MINIP_TABLES = ["witness", "witness_maxerr", "transition", "thresholds", "paper", "constructions"]
MINIP_OUTPUTS = (
    [f"{f}.{ext}" for f in MINIP_FIGURES for ext in ("pdf", "png")]
    + [f"figures/tables/minip/{MINIP_NAME}/minip_{t}.{ext}" for t in MINIP_TABLES for ext in ("csv", "md")]
)


# the only value of the {grid} wildcard: the configured grid's name
wildcard_constraints:
    grid=re.escape(MINIP_NAME),


# small jobs (seconds): on a cluster they run on the submitting host, not through the scheduler
localrules: minip_witness_bound, minip_constructions, minip_collect, minip_figure, minip_table, minip_measured


rule minip_witness_bound:
    output:
        json="data/minip/{grid}/witness_bound.json",
        sidecar="data/minip/{grid}/witness_bound.json.json",
    params:
        grid=MINIP_NAME,
        witness=MINIP["witness"],
        code=code("minip_witness_bound.py"),
    threads: 1
    priority: priority_of("minip_witness_bound")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=500,
        runtime=5,
    log:
        "data/logs/minip/{grid}/witness_bound.log",
    benchmark:
        "benchmarks/minip/{grid}/witness_bound.tsv"
    script:
        "../scripts/minip_witness_bound.py"


rule minip_constructions:
    output:
        csv="data/minip/{grid}/constructions.csv",
        sidecar="data/minip/{grid}/constructions.csv.json",
    params:
        grid=MINIP_NAME,
        constructions=MINIP["constructions"],
        witness=MINIP["witness"],
        code=code("minip_constructions.py"),
    threads: 1
    priority: priority_of("minip_constructions")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/minip/{grid}/constructions.log",
    benchmark:
        "benchmarks/minip/{grid}/constructions.tsv"
    script:
        "../scripts/minip_constructions.py"


# One training job per group of a setting's models trains every seed of each model in turn: a run takes
# seconds, and starting a job (Python, torch, the script's imports) costs about as much again. The groups
# (attncert.minip.sweep.train_parts) keep each job's estimated cost within about 50 s. Snakemake's outputs
# cannot depend on wildcards, so each group is a rule of its own, named minip_train_{family}_{part}
# (family: witness, or n{length} for the scaling settings of one length; all minip_train in the cost file
# and on a cluster). Each (model, seed) still gets its own record and sidecar, and each run starts from
# torch.manual_seed(seed) exactly as in its own process.
for _part in MINIP_TRAIN_PARTS:
    rule:
        name:
            f"minip_train_{_part.name}"
        output:
            json=[f"data/minip/{{grid}}/runs/{{setting}}/{m}_s{s}.json" for m in _part.models for s in MINIP["seeds"]],
            sidecar=[f"data/minip/{{grid}}/runs/{{setting}}/{m}_s{s}.json.json" for m in _part.models
                     for s in MINIP["seeds"]],
        wildcard_constraints:
            setting="|".join(re.escape(s) for s in _part.settings),
        params:
            grid=MINIP_NAME,
            run=lambda wc: _minip_run_params(MINIP, wc.setting, config["device"]),
            seeds=MINIP["seeds"],
            models=list(_part.models),
            code=code("minip_train.py"),
        threads: 1
        priority: priority_of("minip_train")
        # on a cluster, these jobs are packed into fewer scheduler jobs (profile: group-components)
        group:
            "minip_train"
        conda:
            "../../environment.yml"
        resources:
            mem_mb=1000,
            runtime=2 + 2 * len(MINIP["seeds"]) * len(_part.models),  # minutes; a run takes seconds on the default grid
        log:
            f"data/logs/minip/{{grid}}/train/{{setting}}/{_part.part}.log",
        benchmark:
            f"benchmarks/minip/{{grid}}/train/{{setting}}/{_part.part}.tsv"
        script:
            "../scripts/minip_train.py"


rule minip_collect:
    input:
        runs=MINIP_RUNS,
    output:
        csv="data/minip/{grid}/sweep.csv",
        sidecar="data/minip/{grid}/sweep.csv.json",
    params:
        grid=MINIP_NAME,
        seeds=MINIP["seeds"],
        code=code("minip_collect.py"),
    threads: 1
    priority: priority_of("minip_collect")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/minip/{grid}/collect.log",
    benchmark:
        "benchmarks/minip/{grid}/collect.tsv"
    script:
        "../scripts/minip_collect.py"


wildcard_constraints:
    minip_figure="|".join(_MINIP_FIGURE_NAMES),


rule minip_figure:
    input:
        unpack(lambda wc: {"sweep": f"data/minip/{wc.grid}/sweep.csv",
                           **({"bound": f"data/minip/{wc.grid}/witness_bound.json"}
                              if "bound" in _MINIP_FIGURE_NAMES[wc.minip_figure] else {}),
                           **({"claims": "data/paper_claims.yaml"}
                              if "claims" in _MINIP_FIGURE_NAMES[wc.minip_figure] else {})}),
    output:
        pdf="figures/minip/{grid}/{minip_figure}.pdf",
        png=report("figures/minip/{grid}/{minip_figure}.png", caption="../report/minip.rst", category="5 Paper B, Min-IP",
                   subcategory="Figures", labels=lambda wc: {"figure": wc.minip_figure.replace("_", " ")}),
    params:
        grid=MINIP_NAME,
        threshold=MINIP_THRESHOLD,
        thresholds=MINIP_REPORT_THRESHOLDS,
        code=code("minip_figure.py"),
    threads: 1
    priority: priority_of("minip_figure")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/minip/{grid}/figure_{minip_figure}.log",
    benchmark:
        "benchmarks/minip/{grid}/figure_{minip_figure}.tsv"
    script:
        "../scripts/minip_figure.py"


rule minip_table:
    input:
        unpack(lambda wc: _minip_table_inputs(wc.table, wc.grid)),
    output:
        csv="figures/tables/minip/{grid}/minip_{table}.csv",
        md="figures/tables/minip/{grid}/minip_{table}.md",
    wildcard_constraints:
        table="witness|witness_maxerr|transition|thresholds|paper|constructions",
    params:
        grid=MINIP_NAME,
        threshold=MINIP_THRESHOLD,
        thresholds=MINIP_REPORT_THRESHOLDS,
        code=code("minip_table.py"),
    threads: 1
    priority: priority_of("minip_table")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/minip/{grid}/table_{table}.log",
    benchmark:
        "benchmarks/minip/{grid}/table_{table}.tsv"
    script:
        "../scripts/minip_table.py"


MINIP_MEASURED = [f"figures/tables/minip/{MINIP_NAME}/minip_measured.json"]


rule minip_measured:
    input:
        unpack(lambda wc: _minip_table_inputs("witness", wc.grid)),
        constructions="data/minip/{grid}/constructions.csv",
    output:
        "figures/tables/minip/{grid}/minip_measured.json",
    params:
        grid=MINIP_NAME,
        threshold=MINIP_THRESHOLD,
        thresholds=MINIP_REPORT_THRESHOLDS,
        code=code("minip_measured.py"),
    threads: 1
    priority: priority_of("minip_measured")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/minip/{grid}/measured.log",
    benchmark:
        "benchmarks/minip/{grid}/measured.tsv"
    script:
        "../scripts/minip_measured.py"
