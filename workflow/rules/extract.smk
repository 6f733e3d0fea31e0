# Stage 1: load the model once, run the prompts, write per layer the head weights, the rest of the
# block's weights and the normalized tokens every head reads (data/extract/{model}/layer{L}.npz + .json).

EXTRACT_OUTPUTS = expand("data/extract/{model}/layer{layer}.npz", model=MODEL, layer=LAYERS)


rule extract:
    input:
        prompts=config["prompts"],
    output:
        npz=expand("data/extract/{{model}}/layer{layer}.npz", layer=LAYERS),
        meta=expand("data/extract/{{model}}/layer{layer}.npz.json", layer=LAYERS),
    params:
        model=MODEL_CFG,
        layers=LAYERS,
        n_prompts=config["n_prompts"],
        max_tokens=config["max_tokens"],
        code=code("extract_layers.py"),
    threads: 2
    # Paper A's chain (extract, certify, baselines, block, audit; long context) is the DAG's longest
    # path: its rules have priority, so it starts first and the short Min-IP jobs fill the free core.
    priority: 2
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
