# Audit: every certified number of the certification and long-context tables re-derived from its stored
# certificate, without a solver, every unit of the configured grids present; the block table's certificates
# re-checked from transition{L}_certificates.npz, its other numbers listed with their coverage (attncert.audit;
# docs/audit.md). One table per model.
AUDIT_OUTPUTS = [f"figures/tables/{MODEL}/audit.csv", f"figures/tables/{MODEL}/audit.md"]


rule audit:
    input:
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
