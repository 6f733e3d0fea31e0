# Stage 1: load the model once, run the prompts, write per layer the head weights and the
# normalized tokens every head reads (data/extract/{model}/layer{L}.npz + .npz.json provenance).

EXTRACT_OUTPUTS = expand("data/extract/{model}/layer{layer}.npz", model=MODEL, layer=LAYERS)


rule extract:
    input:
        prompts=config["prompts"],
    output:
        npz=expand("data/extract/{{model}}/layer{layer}.npz", layer=LAYERS),
        meta=expand("data/extract/{{model}}/layer{layer}.npz.json", layer=LAYERS),
    params:
        layers=LAYERS,
    threads: 2
    conda:
        "../../environment.yml"
    resources:
        mem_mb=4000,
        runtime=20,
    log:
        "data/logs/{model}/extract.log",
    benchmark:
        "benchmarks/{model}/extract.tsv"
    script:
        "../scripts/extract_layers.py"
