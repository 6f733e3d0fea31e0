# Paper B (Min-IP): constructions checked exhaustively, the witness family and its proven rank bound,
# one training job per (setting, model) running every seed, then tables (figures/tables/minip_*) and figures
# (figures/minip/*). Everything is model-independent (no transformer weights are read).
from attncert.minip.sweep import runs as _minip_runs, run_params as _minip_run_params, table_inputs as _minip_table_inputs
from attncert.minip.codes import hadamard as _minip_hadamard
from attncert.minip.figure_names import FIGURES as _MINIP_FIGURE_NAMES

MINIP = config["minip"]
try:
    _minip_hadamard(MINIP["witness"]["bits"])
    if not 2 <= MINIP["witness"]["queries"] <= MINIP["witness"]["bits"] - 1:
        raise ValueError(f"queries must be in 2..{MINIP['witness']['bits'] - 1}")
except ValueError as _e:
    raise SystemExit(f"attncert: config key 'minip.witness': {_e}; fix: use bits in [8, 12, 16, 20, 24, 32, 44, 48] and 2 <= queries < bits")

MINIP_RUNS = [r.path for r in _minip_runs(MINIP)]
MINIP_THRESHOLD = MINIP["scaling"]["threshold"]
MINIP_REPORT_THRESHOLDS = MINIP["scaling"]["report_thresholds"]
MINIP_FIGURES = [f"figures/minip/{name}" for name in _MINIP_FIGURE_NAMES]
MINIP_TABLES = ["witness", "witness_maxerr", "transition", "thresholds", "paper", "constructions"]
MINIP_OUTPUTS = (
    [f"{f}.{ext}" for f in MINIP_FIGURES for ext in ("pdf", "png")]
    + [f"figures/tables/minip_{t}.{ext}" for t in MINIP_TABLES for ext in ("csv", "md")]
)


# small jobs (seconds): on a cluster they run on the submitting host, not through the scheduler
localrules: minip_witness_bound, minip_constructions, minip_collect, minip_figure, minip_table, minip_measured


rule minip_witness_bound:
    output:
        json="data/minip/witness_bound.json",
        sidecar="data/minip/witness_bound.json.json",
    params:
        witness=MINIP["witness"],
        code=code("minip_witness_bound.py"),
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=500,
        runtime=5,
    log:
        log_path("minip", "witness_bound"),
    benchmark:
        bench_path("minip", "witness_bound")
    script:
        "../scripts/minip_witness_bound.py"


rule minip_constructions:
    output:
        csv="data/minip/constructions.csv",
        sidecar="data/minip/constructions.csv.json",
    params:
        constructions=MINIP["constructions"],
        witness=MINIP["witness"],
        code=code("minip_constructions.py"),
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        log_path("minip", "constructions"),
    benchmark:
        bench_path("minip", "constructions")
    script:
        "../scripts/minip_constructions.py"


# One job per (setting, model) trains every seed in turn: a run takes seconds, and starting a job
# (Python, torch, the script's imports) costs about as much again. Each seed still gets its own
# record and sidecar, and each run starts from torch.manual_seed(seed) exactly as in its own process.
rule minip_train:
    output:
        json=expand("data/minip/runs/{{setting}}/{{model}}_s{seed}.json", seed=MINIP["seeds"]),
        sidecar=expand("data/minip/runs/{{setting}}/{{model}}_s{seed}.json.json", seed=MINIP["seeds"]),
    wildcard_constraints:
        setting=r"witness|m\d+-n\d+",
        model=r"r\d+|dense",
    params:
        run=lambda wc: _minip_run_params(MINIP, wc.setting, config["device"]),
        seeds=MINIP["seeds"],
        code=code("minip_train.py"),
    threads: 1
    # on a cluster, these short jobs are packed into one scheduler job (profile: group-components)
    group:
        "minip_train"
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=2 + 2 * len(MINIP["seeds"]),  # minutes; a run takes seconds on the default grid
    log:
        log_path("minip", "train/{setting}/{model}"),
    benchmark:
        bench_path("minip", "train/{setting}/{model}")
    script:
        "../scripts/minip_train.py"


rule minip_collect:
    input:
        runs=MINIP_RUNS,
    output:
        csv="data/minip/sweep.csv",
        sidecar="data/minip/sweep.csv.json",
    params:
        seeds=MINIP["seeds"],
        code=code("minip_collect.py"),
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        log_path("minip", "collect"),
    benchmark:
        bench_path("minip", "collect")
    script:
        "../scripts/minip_collect.py"


wildcard_constraints:
    minip_figure="|".join(_MINIP_FIGURE_NAMES),


rule minip_figure:
    input:
        unpack(lambda wc: {"sweep": "data/minip/sweep.csv",
                           **({"bound": "data/minip/witness_bound.json"}
                              if "bound" in _MINIP_FIGURE_NAMES[wc.minip_figure] else {}),
                           **({"claims": "data/paper_claims.yaml"}
                              if "claims" in _MINIP_FIGURE_NAMES[wc.minip_figure] else {})}),
    output:
        pdf="figures/minip/{minip_figure}.pdf",
        png=report("figures/minip/{minip_figure}.png", caption="../report/minip.rst", category="Paper B, Min-IP"),
    params:
        threshold=MINIP_THRESHOLD,
        thresholds=MINIP_REPORT_THRESHOLDS,
        code=code("minip_figure.py"),
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        log_path("minip", "figure_{minip_figure}"),
    benchmark:
        bench_path("minip", "figure_{minip_figure}")
    script:
        "../scripts/minip_figure.py"


rule minip_table:
    input:
        unpack(lambda wc: _minip_table_inputs(wc.table)),
    output:
        csv="figures/tables/minip_{table}.csv",
        md="figures/tables/minip_{table}.md",
    wildcard_constraints:
        table="witness|witness_maxerr|transition|thresholds|paper|constructions",
    params:
        threshold=MINIP_THRESHOLD,
        thresholds=MINIP_REPORT_THRESHOLDS,
        code=code("minip_table.py"),
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        log_path("minip", "table_{table}"),
    benchmark:
        bench_path("minip", "table_{table}")
    script:
        "../scripts/minip_table.py"


MINIP_MEASURED = ["figures/tables/minip_measured.json"]


rule minip_measured:
    input:
        unpack(lambda wc: _minip_table_inputs("witness")),
        constructions="data/minip/constructions.csv",
    output:
        MINIP_MEASURED,
    params:
        threshold=MINIP_THRESHOLD,
        thresholds=MINIP_REPORT_THRESHOLDS,
        code=code("minip_measured.py"),
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        log_path("minip", "measured"),
    benchmark:
        bench_path("minip", "measured")
    script:
        "../scripts/minip_measured.py"
