# Audit: every certified number of the certification and long-context tables re-derived from its stored
# certificate, without a solver, every unit of the configured grids present; the block table's certificates
# re-checked from transition{L}_certificates.npz, its other numbers listed with their coverage (attncert.audit;
# docs/audit.md). One table per model.
AUDIT_OUTPUTS = [f"figures/tables/{MODEL}/audit.csv", f"figures/tables/{MODEL}/audit.md"]


localrules: run_configuration


# The run's configuration as merged, with the layers, heads and block transitions resolved for the model: what
# `attncert audit --model M` checks the run against without being told (attncert.audit.run_configuration).
rule run_configuration:
    output:
        config="data/run/{model}/config.yaml",
    params:
        model=MODEL_CFG,
        config=config,
        resolved={"layers": LAYERS, "heads": HEADS, "block_transitions": BLOCK_TRANSITIONS},
        code=code("run_configuration.py"),
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=500,
        runtime=2,
    log:
        "data/logs/{model}/run_configuration.log",
    benchmark:
        "benchmarks/{model}/run_configuration.tsv"
    script:
        "../scripts/run_configuration.py"


rule audit:
    input:
        run_config="data/run/{model}/config.yaml",
        tables=expand("data/certify/{{model}}/layer{layer}.csv", layer=LAYERS),
        certificates=expand("data/certify/{{model}}/layer{layer}_certificates.npz", layer=LAYERS),
        specs=expand("data/certify/{{model}}/layer{layer}_spec.npz", layer=LAYERS),
        weights=expand("data/extract/{{model}}/layer{layer}.npz", layer=LAYERS),
        long_context="data/long_context/{model}/units.csv",
        long_context_certificates="data/long_context/{model}/units_certificates.npz",
        long_context_tokens="data/long_context/{model}/layer_tokens.npz",
        block="data/block/{model}/units.csv",
        block_certificates=expand("data/block/{{model}}/transition{transition}_certificates.npz",
                                  transition=BLOCK_TRANSITIONS),
    output:
        csv="figures/tables/{model}/audit.csv",
        md="figures/tables/{model}/audit.md",
    params:
        model=MODEL_CFG,
        layers=LAYERS,
        heads=HEADS,
        certify=config["certify"],
        n_prompts=config["n_prompts"],
        long_context=LC,
        spec_seed=config["spec_seed"],
        block=config["block"],
        code=code("audit.py"),
    threads: 1
    priority: 1  # on the longest path (extract.smk)
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=30,
    log:
        "data/logs/{model}/audit.log",
    benchmark:
        "benchmarks/{model}/audit.tsv"
    script:
        "../scripts/audit.py"
