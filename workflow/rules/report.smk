# Final stage: every claim of both papers beside ours with its verdict (figures/tables/{model}/paper_vs_reproduced.md,
# under the model like every result, so a run on another model never rewrites it); the .json is the snapshot `python -m attncert.paper_comparison.readme_results` turns into the README's tally and docs/results.md.

PAPER_VS_REPRODUCED = f"figures/tables/{MODEL}/paper_vs_reproduced.md"
REPORT_OUTPUTS = [PAPER_VS_REPRODUCED]


# small jobs (seconds): on a cluster they run on the submitting host, not through the scheduler
localrules: paper_vs_reproduced


rule paper_vs_reproduced:
    input:
        claims="data/paper_claims.yaml",
        measured=MEASURED_FILES,
    output:
        md="figures/tables/{model}/paper_vs_reproduced.md",
        csv="figures/tables/{model}/paper_vs_reproduced.csv",
        snapshot="figures/tables/{model}/paper_vs_reproduced.json",
    params:
        model=MODEL_CFG,
        code=code("paper_vs_reproduced.py"),
    threads: 1
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/paper_vs_reproduced.log",
    script:
        "../scripts/paper_vs_reproduced.py"
