# Long-context experiment (beyond the paper): one public-domain passage read at growing context lengths,
# the certificates of one layer's heads attending to up to `long_context.lengths` keys (fixed and varying query),
# each certified number stored with its certificate (audited by the audit rule).
from attncert.certify.long_context_jobs import (group_label as _lc_group_label, group_of_label as _lc_group_of_label,
                                               length_groups as _lc_length_groups, part_keys as _lc_part_keys,
                                               part_stem as _lc_part_stem)

LC = config.get("long_context", {})
LONG_CONTEXT_OUTPUTS = [
    f"figures/long_context/{MODEL}/gap_and_time_vs_keys.pdf",
    f"figures/tables/{MODEL}/long_context.md",
] if LC else []


localrules: long_context_report


rule long_context_extract:
    input:
        passage=LC.get("passage", "data/long_context_passage.txt"),
    output:
        npz="data/long_context/{model}/layer_tokens.npz",
    params:
        model=MODEL_CFG,
        layer=LC.get("layer", 0),
        lengths=LC.get("lengths", []),
        code=code("long_context_extract.py"),
    # one thread: with two its CPU seconds equal its wall seconds (benchmarks/{model}/long_context/extract.tsv),
    # and a two-thread job waits until both cores are free at once
    threads: 1
    priority: priority_of("long_context_extract")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=4000,
        runtime=20,
    log:
        "data/logs/{model}/long_context/extract.log",
    benchmark:
        "benchmarks/{model}/long_context/extract.tsv"
    script:
        "../scripts/long_context_extract.py"


# One job per (length group, head): the units of one head at a group of context lengths (fixed and varying query,
# every norm and radius), a part of the table with its certificates; the short lengths share a job, so that each
# costs about the longest length's (attncert.certify.long_context_jobs). The merge writes the one table and
# certificate file every reader takes (attncert.certify.long_context_parts). Another head adds or drops its parts
# only; another length also re-extracts the token file (all lengths), which reruns every part.
rule long_context_certify:
    input:
        npz="data/long_context/{model}/layer_tokens.npz",
    output:
        csv="data/long_context/{model}/parts/lengths{lengths}_head{head}.csv",
        certificates="data/long_context/{model}/parts/lengths{lengths}_head{head}_certificates.npz",
    wildcard_constraints:
        lengths="|".join(_lc_group_label(g) for g in _lc_length_groups(LC.get("lengths", []))) or r"[\d-]+",
        head="|".join(str(h) for h in LC.get("heads", [])) or r"\d+",
    params:
        model=MODEL_CFG,
        layer=LC.get("layer", 0),
        lengths=lambda wc: list(_lc_group_of_label(wc.lengths)),
        head=lambda wc: int(wc.head),
        query_position=LC.get("query_position", 0),
        radii=LC.get("radii", []),
        norms=LC.get("norms", ["linf"]),
        modes=LC.get("modes", ["fixed", "varying"]),
        tight=LC.get("tight", True),
        ascent_restarts=LC.get("ascent_restarts", 2),
        ascent_steps=config["certify"]["ascent_steps"],
        seed=config["certify"]["seed"],
        spec_seed=config["spec_seed"],
        code=code("long_context_certify.py"),
    threads: 1
    priority: priority_of("long_context_certify")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=3000,
        runtime=20,
    log:
        "data/logs/{model}/long_context/certify_lengths{lengths}_head{head}.log",
    benchmark:
        "benchmarks/{model}/long_context/certify_lengths{lengths}_head{head}.tsv"
    script:
        "../scripts/long_context_certify.py"


rule long_context_merge:
    input:
        tables=[f"data/long_context/{{model}}/parts/{_lc_part_stem(g, h)}.csv"
                for g, h in _lc_part_keys(LC.get("lengths", []), LC.get("heads", []))],
        certificates=[f"data/long_context/{{model}}/parts/{_lc_part_stem(g, h)}_certificates.npz"
                      for g, h in _lc_part_keys(LC.get("lengths", []), LC.get("heads", []))],
    output:
        csv="data/long_context/{model}/units.csv",
        certificates="data/long_context/{model}/units_certificates.npz",
    params:
        model=MODEL_CFG,
        lengths=LC.get("lengths", []),
        heads=LC.get("heads", [0]),
        radii=LC.get("radii", []),
        norms=LC.get("norms", ["linf"]),
        modes=LC.get("modes", ["fixed", "varying"]),
        code=code("long_context_merge.py"),
    threads: 1
    priority: priority_of("long_context_merge")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=5,
    log:
        "data/logs/{model}/long_context/merge.log",
    benchmark:
        "benchmarks/{model}/long_context/merge.tsv"
    script:
        "../scripts/long_context_merge.py"


rule long_context_report:
    input:
        csv="data/long_context/{model}/units.csv",
        claims="data/paper_claims.yaml",
    output:
        pdf="figures/long_context/{model}/gap_and_time_vs_keys.pdf",
        png=report("figures/long_context/{model}/gap_and_time_vs_keys.png", caption="../report/long_context.rst",
                   category="4 Paper A, long context (beyond the paper)",
                   subcategory="Figures", labels={"figure": "gap and time vs keys"}),
        md="figures/tables/{model}/long_context.md",
        measured="figures/tables/{model}/long_context_measured.json",
    params:
        model=MODEL_CFG,
        code=code("long_context_report.py"),
    threads: 1
    priority: priority_of("long_context_report")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/long_context/report.log",
    script:
        "../scripts/long_context_report.py"
