# Stage 3: IBP / CROWN / alpha-CROWN on the certification units of the baseline grid, and the
# comparison with the second-order certificate.

BASELINE_TABLE = "figures/tables/{model}/baselines.md"
BASELINE_FIGURE = "figures/baselines/{model}/gap_vs_radius.pdf"
BASELINES_OUTPUTS = [BASELINE_TABLE.format(model=MODEL), BASELINE_FIGURE.format(model=MODEL)]


# small jobs (seconds): on a cluster they run on the submitting host, not through the scheduler
localrules: baselines_table, baselines_figure


rule baselines_layer:
    input:
        npz="data/extract/{model}/layer{layer}.npz",
        spec="data/certify/{model}/layer{layer}_spec.npz",
        cert="data/certify/{model}/layer{layer}.csv",
    output:
        csv="data/baselines/{model}/layer{layer}.csv",
    params:
        model=MODEL_CFG,
        heads=HEADS,
        prompts=config["baselines"].get("prompts", list(range(config["n_prompts"]))),
        query_positions=config["baselines"]["query_positions"],
        radii=config["baselines"]["radii"],
        norms=config["baselines"]["norms"],
        modes=config["baselines"]["modes"],
        methods=config["baselines"]["methods"],
        alpha={k: config["baselines"][k] for k in ("alpha_iterations", "alpha_tolerance", "alpha_patience", "alpha_lr", "alpha_betas")},
        device=config["device"],
        code=code("baselines_layer.py"),
    threads: 1
    priority: priority_of("baselines_layer")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=3000,
        runtime=120,
    log:
        "data/logs/{model}/baselines/layer{layer}.log",
    benchmark:
        "benchmarks/{model}/baselines/layer{layer}.tsv"
    script:
        "../scripts/baselines_layer.py"


rule baselines_table:
    input:
        baselines=expand("data/baselines/{{model}}/layer{layer}.csv", layer=LAYERS),
        cert=expand("data/certify/{{model}}/layer{layer}.csv", layer=LAYERS),
    output:
        md=BASELINE_TABLE,
        csv="figures/tables/{model}/baselines.csv",
        slopes="figures/tables/{model}/baselines_slopes.csv",
        headline="figures/tables/{model}/baselines_headline.csv",
        measured="figures/tables/{model}/baselines_measured.json",
    params:
        model=MODEL_CFG,
        code=code("baselines_table.py"),
    threads: 1
    priority: priority_of("baselines_table")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/baselines/table.log",
    script:
        "../scripts/baselines_table.py"


rule baselines_figure:
    input:
        baselines=expand("data/baselines/{{model}}/layer{layer}.csv", layer=LAYERS),
        cert=expand("data/certify/{{model}}/layer{layer}.csv", layer=LAYERS),
        claims="data/paper_claims.yaml",
    output:
        pdf=BASELINE_FIGURE,
        png=report(BASELINE_FIGURE.replace(".pdf", ".png"), caption="../report/baselines_gap.rst",
                   category="2 Paper A, baselines", subcategory="Figures", labels={"figure": "gap vs radius"}),
    params:
        model=MODEL_CFG,
        code=code("baselines_figure.py"),
    threads: 1
    priority: priority_of("baselines_figure")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/baselines/figure.log",
    script:
        "../scripts/baselines_figure.py"
