# Stage 2: per layer, every unit's exact worst case, best feasible value and certificates
# (data/certify/{model}/layer{L}.csv, the specification vectors in layer{L}_spec.npz).

CERTIFY_TABLES = expand("data/certify/{model}/layer{layer}.csv", model=MODEL, layer=LAYERS)
CERTIFY_OUTPUTS = CERTIFY_TABLES


rule certify_layer:
    input:
        npz="data/extract/{model}/layer{layer}.npz",
    output:
        csv="data/certify/{model}/layer{layer}.csv",
        spec="data/certify/{model}/layer{layer}_spec.npz",
    params:
        heads=HEADS,
        prompts=config["certify"].get("prompts", list(range(config["n_prompts"]))),
        query_positions=config["certify"]["query_positions"],
        radii=config["certify"]["radii"],
        norms=config["certify"]["norms"],
        modes=config["certify"]["modes"],
        ascent_restarts=config["certify"]["ascent_restarts"],
        ascent_steps=config["certify"]["ascent_steps"],
        seed=config["certify"]["seed"],
        second_order=config["certify"].get("second_order", True),
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=3000,
        runtime=120,
    log:
        "data/logs/{model}/certify/layer{layer}.log",
    benchmark:
        "benchmarks/{model}/certify/layer{layer}.tsv"
    script:
        "../scripts/certify_layer.py"


CERTIFY_FIGURES = {
    "relative_gap": "figures/certify/{model}/relative_gap_vs_radius.pdf",
    "gap_over_secant": "figures/certify/{model}/gap_over_secant_bound.pdf",
    "within": "figures/certify/{model}/certified_within.pdf",
}
CERTIFY_OUTPUTS = CERTIFY_TABLES + [
    f.format(model=MODEL) for f in CERTIFY_FIGURES.values()
] + [f"figures/tables/{MODEL}/certification.md"]


rule certify_figure_relative_gap:
    input:
        tables=expand("data/certify/{{model}}/layer{layer}.csv", layer=LAYERS),
    output:
        report(CERTIFY_FIGURES["relative_gap"], caption="../report/certify_relative_gap.rst", category="Paper A: certificates"),
        png=CERTIFY_FIGURES["relative_gap"].replace(".pdf", ".png"),
    params:
        what="relative_gap",
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/certify/figure_relative_gap.log",
    script:
        "../scripts/certify_figures.py"


rule certify_figure_gap_over_secant:
    input:
        tables=expand("data/certify/{{model}}/layer{layer}.csv", layer=LAYERS),
    output:
        report(CERTIFY_FIGURES["gap_over_secant"], caption="../report/certify_gap_over_secant.rst", category="Paper A: certificates"),
        png=CERTIFY_FIGURES["gap_over_secant"].replace(".pdf", ".png"),
    params:
        what="gap_over_secant",
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/certify/figure_gap_over_secant.log",
    script:
        "../scripts/certify_figures.py"


rule certify_figure_within:
    input:
        tables=expand("data/certify/{{model}}/layer{layer}.csv", layer=LAYERS),
    output:
        report(CERTIFY_FIGURES["within"], caption="../report/certify_within.rst", category="Paper A: certificates"),
        png=CERTIFY_FIGURES["within"].replace(".pdf", ".png"),
    params:
        what="within",
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/certify/figure_within.log",
    script:
        "../scripts/certify_figures.py"


rule certify_table:
    input:
        tables=expand("data/certify/{{model}}/layer{layer}.csv", layer=LAYERS),
    output:
        table="figures/tables/{model}/certification.csv",
        slopes="figures/tables/{model}/certification_slopes.csv",
        paper="figures/tables/{model}/certification_vs_paper.csv",
        violations="figures/tables/{model}/soundness_violations.csv",
        md="figures/tables/{model}/certification.md",
        measured="figures/tables/{model}/certify_measured.json",
    params:
        what="table",
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/certify/table.log",
    script:
        "../scripts/certify_figures.py"
