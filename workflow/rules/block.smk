# Stage 4 (Paper A, block residual experiment): per block transition l -> l+1, every head of block
# l+1 is a unit; data/block/{model}/transition{L}.csv (second-order term, ascent, CROWN, per-op sums),
# merged into data/block/{model}/units.csv; then one table and three figures.
from attncert.block.map import transition_points

BLOCK_TRANSITIONS = transition_points(_dims[0], LAYERS)
BLOCK_TABLES = [f"figures/tables/{MODEL}/block_{name}.{ext}" for name in ("summary", "vs_paper") for ext in ("csv", "md")]
BLOCK_FIGURES = {
    "crown_vs_predicted": "figures/block/{model}/crown_vs_predicted_looseness.pdf",
    "distributions": "figures/block/{model}/looseness_and_rank.pdf",
    "crown_over_perop": "figures/block/{model}/crown_over_per_op_sum.pdf",
}
BLOCK_OUTPUTS = (BLOCK_TABLES + [f.format(model=MODEL) for f in BLOCK_FIGURES.values()]
                 + [f.format(model=MODEL).replace(".pdf", ".png") for f in BLOCK_FIGURES.values()]) if BLOCK_TRANSITIONS else []


wildcard_constraints:
    transition=r"\d+",


rule block_transition:
    input:
        npz="data/extract/{model}/layer{transition}.npz",
        next=lambda wc: f"data/extract/{wc.model}/layer{int(wc.transition) + 1}.npz",
    output:
        csv="data/block/{model}/transition{transition}.csv",
    params:
        heads=HEADS,
        block=config["block"],
    threads: 1
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
    threads: 1
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
        measured="figures/tables/{model}/block_measured.json",
    params:
        what="table",
        block=config["block"],
    threads: 1
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
        "../scripts/block_report.py"


rule block_figure_crown_vs_predicted:
    input:
        units="data/block/{model}/units.csv",
        claims="data/paper_claims.yaml",
    output:
        report(BLOCK_FIGURES["crown_vs_predicted"], caption="../report/block_crown_vs_predicted.rst", category="Paper A: block residual"),
        png=BLOCK_FIGURES["crown_vs_predicted"].replace(".pdf", ".png"),
    params:
        what="crown_vs_predicted",
        block=config["block"],
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/block/figure_crown_vs_predicted.log",
    benchmark:
        "benchmarks/{model}/block/figure_crown_vs_predicted.tsv"
    script:
        "../scripts/block_report.py"


rule block_figure_distributions:
    input:
        units="data/block/{model}/units.csv",
        claims="data/paper_claims.yaml",
    output:
        report(BLOCK_FIGURES["distributions"], caption="../report/block_distributions.rst", category="Paper A: block residual"),
        png=BLOCK_FIGURES["distributions"].replace(".pdf", ".png"),
    params:
        what="distributions",
        block=config["block"],
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/block/figure_distributions.log",
    benchmark:
        "benchmarks/{model}/block/figure_distributions.tsv"
    script:
        "../scripts/block_report.py"


rule block_figure_crown_over_perop:
    input:
        units="data/block/{model}/units.csv",
        claims="data/paper_claims.yaml",
    output:
        report(BLOCK_FIGURES["crown_over_perop"], caption="../report/block_crown_over_perop.rst", category="Paper A: block residual"),
        png=BLOCK_FIGURES["crown_over_perop"].replace(".pdf", ".png"),
    params:
        what="crown_over_perop",
        block=config["block"],
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/block/figure_crown_over_perop.log",
    benchmark:
        "benchmarks/{model}/block/figure_crown_over_perop.tsv"
    script:
        "../scripts/block_report.py"
