# Stage 4 (Paper A, block residual experiment): per block transition l -> l+1, every head of block
# l+1 is a unit; data/block/{model}/transition{L}.csv (second-order term, ascent, CROWN, per-op sums),
# merged into data/block/{model}/units.csv; then the tables and one rule for the figures.
from attncert.block.figure_names import FIGURE_NAMES as _BLOCK_FIGURE_NAMES
from attncert.block.transitions import transition_points

BLOCK_TRANSITIONS = transition_points(_dims[0], LAYERS)
BLOCK_TABLES = [f"figures/tables/{MODEL}/block_{name}.{ext}" for name in ("summary", "vs_paper", "certificate")
                for ext in ("csv", "md")]
BLOCK_FIGURES = [f"figures/block/{MODEL}/{name}.{ext}" for name in _BLOCK_FIGURE_NAMES for ext in ("pdf", "png")]
BLOCK_OUTPUTS = BLOCK_TABLES + BLOCK_FIGURES if BLOCK_TRANSITIONS else []


wildcard_constraints:
    transition=r"\d+",
    block_figure="|".join(_BLOCK_FIGURE_NAMES),


# small jobs (seconds): on a cluster they run on the submitting host, not through the scheduler
localrules: block_merge, block_table, block_figure


rule block_transition:
    input:
        npz="data/extract/{model}/layer{transition}.npz",
        next=lambda wc: f"data/extract/{wc.model}/layer{int(wc.transition) + 1}.npz",
    output:
        csv="data/block/{model}/transition{transition}.csv",
        certificates="data/block/{model}/transition{transition}_certificates.npz",
    params:
        model=MODEL_CFG,
        heads=HEADS,
        block=config["block"],
        spec_seed=config["spec_seed"],
        code=code("block_transition.py"),
    threads: 1
    priority: priority_of("block_transition")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=6000,
        runtime=30,
    log:
        "data/logs/{model}/block/transition{transition}.log",
    benchmark:
        "benchmarks/{model}/block/transition{transition}.tsv"
    script:
        "../scripts/block_transition.py"


rule block_merge:
    input:
        tables=expand("data/block/{{model}}/transition{transition}.csv", transition=BLOCK_TRANSITIONS),
    output:
        units="data/block/{model}/units.csv",
    params:
        model=MODEL_CFG,
        code=code("block_merge.py"),
    threads: 1
    priority: priority_of("block_merge")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/block/merge.log",
    benchmark:
        "benchmarks/{model}/block/merge.tsv"
    script:
        "../scripts/block_merge.py"


rule block_table:
    input:
        units="data/block/{model}/units.csv",
        claims="data/paper_claims.yaml",
    output:
        summary="figures/tables/{model}/block_summary.csv",
        summary_md="figures/tables/{model}/block_summary.md",
        paper="figures/tables/{model}/block_vs_paper.csv",
        paper_md="figures/tables/{model}/block_vs_paper.md",
        certificate="figures/tables/{model}/block_certificate.csv",
        certificate_md="figures/tables/{model}/block_certificate.md",
        measured="figures/tables/{model}/block_measured.json",
    params:
        block=config["block"],
        model=MODEL_CFG,
        code=code("block_table.py"),
    threads: 1
    priority: priority_of("block_table")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/block/table.log",
    benchmark:
        "benchmarks/{model}/block/table.tsv"
    script:
        "../scripts/block_table.py"


rule block_figure:
    input:
        units="data/block/{model}/units.csv",
        claims="data/paper_claims.yaml",
    output:
        pdf="figures/block/{model}/{block_figure}.pdf",
        png=report("figures/block/{model}/{block_figure}.png", caption="../report/block.rst",
                   category="3 Paper A, block residual", subcategory="Figures",
                   labels=lambda wc: {"figure": wc.block_figure.replace("_", " ")}),
    params:
        block=config["block"],
        model=MODEL_CFG,
        code=code("block_figure.py"),
    threads: 1
    priority: priority_of("block_figure")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/block/figure_{block_figure}.log",
    benchmark:
        "benchmarks/{model}/block/figure_{block_figure}.tsv"
    script:
        "../scripts/block_figure.py"
