# Stage 1: per layer, load the model, run the prompts, write the head weights, the rest of the block's
# weights and the normalized tokens every head reads (data/extract/{model}/layer{L}.npz + .json).
# One job per layer: a damaged layer file is regenerated alone, without rerunning the other layers' dependents.

EXTRACT_OUTPUTS = expand("data/extract/{model}/layer{layer}.npz", model=MODEL, layer=LAYERS)


rule extract:
    input:
        prompts=config["prompts"],
    output:
        npz="data/extract/{model}/layer{layer}.npz",
        meta="data/extract/{model}/layer{layer}.npz.json",
    params:
        model=MODEL_CFG,
        n_prompts=config["n_prompts"],
        max_tokens=config["max_tokens"],
        code=code("extract_layers.py"),
    threads: 1
    priority: priority_of("extract")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=4000,
        runtime=20,
    log:
        "data/logs/{model}/extract/layer{layer}.log",
    benchmark:
        "benchmarks/{model}/extract/layer{layer}.tsv"
    script:
        "../scripts/extract_layers.py"
