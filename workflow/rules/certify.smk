# Stage 2: per layer, every unit's exact worst case, best feasible value and certificates
# (data/certify/{model}/layer{L}.csv, the specification vectors in layer{L}_spec.npz); then the
# stage's tables and one rule for its figures (wildcard: the figure's name).
from attncert.certify.figure_names import FIGURE_NAMES as _CERTIFY_FIGURE_NAMES

CERTIFY_TABLES = expand("data/certify/{model}/layer{layer}.csv", model=MODEL, layer=LAYERS)
CERTIFY_FIGURES = [f"figures/certify/{MODEL}/{name}.pdf" for name in _CERTIFY_FIGURE_NAMES]
CERTIFY_OUTPUTS = CERTIFY_TABLES + CERTIFY_FIGURES + [f"figures/tables/{MODEL}/certification.md"]


wildcard_constraints:
    certify_figure="|".join(_CERTIFY_FIGURE_NAMES),


# small jobs (seconds): on a cluster they run on the submitting host, not through the scheduler
localrules: certify_figure, certify_table


rule certify_layer:
    input:
        npz="data/extract/{model}/layer{layer}.npz",
    output:
        csv="data/certify/{model}/layer{layer}.csv",
        spec="data/certify/{model}/layer{layer}_spec.npz",
        certificates="data/certify/{model}/layer{layer}_certificates.npz",
    params:
        model=MODEL_CFG,
        heads=HEADS,
        prompts=config["certify"].get("prompts", list(range(config["n_prompts"]))),
        query_positions=config["certify"]["query_positions"],
        radii=config["certify"]["radii"],
        norms=config["certify"]["norms"],
        modes=config["certify"]["modes"],
        ascent_restarts=config["certify"]["ascent_restarts"],
        ascent_steps=config["certify"]["ascent_steps"],
        seed=config["certify"]["seed"],
        second_order=config["certify"]["second_order"],
        tight=config["certify"]["tight"],
        ascent_check_fraction=config["certify"]["ascent_check_fraction"],
        varying=config["certify"].get("varying", {}),
        device=config["device"],
        spec_seed=config["spec_seed"],
        code=code("certify_layer.py"),
    threads: 1
    priority: priority_of("certify_layer")
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


rule certify_figure:
    input:
        tables=expand("data/certify/{{model}}/layer{layer}.csv", layer=LAYERS),
        claims="data/paper_claims.yaml",
    output:
        pdf="figures/certify/{model}/{certify_figure}.pdf",
        png=report("figures/certify/{model}/{certify_figure}.png", caption="../report/certify.rst",
                   category="1 Paper A, certification", subcategory="Figures",
                   labels=lambda wc: {"figure": wc.certify_figure.replace("_", " ")}),
    params:
        model=MODEL_CFG,
        code=code("certify_figure.py"),
    threads: 1
    priority: priority_of("certify_figure")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/certify/figure_{certify_figure}.log",
    script:
        "../scripts/certify_figure.py"


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
        model=MODEL_CFG,
        code=code("certify_table.py"),
    threads: 1
    priority: priority_of("certify_table")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/certify/table.log",
    script:
        "../scripts/certify_table.py"


# Random small heads, no model; the measured file sits with the run's other tables, one per model.
rule certify_method_checks:
    output:
        measured="figures/tables/{model}/method_checks_measured.json",
    params:
        checks=config["certify"]["method_checks"],
        code=code("certify_method_checks.py"),
    threads: 1
    priority: priority_of("certify_method_checks")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=10,
    log:
        "data/logs/{model}/method_checks.log",
    benchmark:
        "benchmarks/{model}/method_checks.tsv"
    script:
        "../scripts/certify_method_checks.py"
