# Audit: every certified number of the certification, long-context and block tables re-derived from its stored
# certificate and the weights, without a solver, every unit of the run's recorded grid present; the extracted
# weights compared with the checkpoint; every summary table recomputed from the row tables (attncert.audit;
# docs/audit.md). One table per model.
from attncert.audit.certificate_pieces import certificate_parts as _certificate_parts

AUDIT_OUTPUTS = [f"figures/tables/{MODEL}/audit.csv", f"figures/tables/{MODEL}/audit.md"]


localrules: run_configuration, audit_certificates_merge


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
    priority: priority_of("run_configuration")
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


# The certificates' part (the costly one), one job per piece as soon as its row tables exist: each certification
# layer, the long-context table, the block table's own checks, each block transition (its certificates re-derived
# from the weights; attncert.audit.certificate_pieces); the merge joins their records in the order `attncert audit`
# writes them; the final audit adds the weights against the checkpoint and the summary tables recomputed from the
# row tables, and writes audit.csv and audit.md.
AUDIT_CERTIFICATE_PARTS = _certificate_parts(LAYERS, BLOCK_TRANSITIONS)  # the order `attncert audit` audits them


rule audit_certificates:
    input:
        run_config="data/run/{model}/config.yaml",
        tables=audit_part_inputs,
    output:
        records="data/audit/{model}/parts/{audit_part}.csv",
    wildcard_constraints:
        audit_part="|".join(AUDIT_CERTIFICATE_PARTS),
    params:
        model=MODEL_CFG,
        part=lambda wc: wc.audit_part,
        code=code("audit_certificates.py"),
    threads: 1
    priority: priority_of("audit_certificates")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=15,
    log:
        "data/logs/{model}/audit/certificates_{audit_part}.log",
    benchmark:
        "benchmarks/{model}/audit/certificates_{audit_part}.tsv"
    script:
        "../scripts/audit_certificates.py"


rule audit_certificates_merge:
    input:
        run_config="data/run/{model}/config.yaml",
        records=expand("data/audit/{{model}}/parts/{audit_part}.csv", audit_part=AUDIT_CERTIFICATE_PARTS),
    output:
        records="data/audit/{model}/certificate_records.csv",
    params:
        model=MODEL_CFG,
        parts=AUDIT_CERTIFICATE_PARTS,
        code=code("audit_certificates_merge.py"),
    threads: 1
    priority: priority_of("audit_certificates_merge")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=1000,
        runtime=5,
    log:
        "data/logs/{model}/audit/certificates_merge.log",
    benchmark:
        "benchmarks/{model}/audit/certificates_merge.tsv"
    script:
        "../scripts/audit_certificates_merge.py"


AUDITED_TABLES = [f"figures/tables/{{model}}/{name}" for name in (
    "certification.csv", "certification_slopes.csv", "certification_vs_paper.csv", "soundness_violations.csv",
    "certification.md", "certify_measured.json", "baselines.csv", "baselines_slopes.csv", "baselines_headline.csv",
    "baselines.md", "baselines_measured.json", "paper_vs_reproduced.csv", "paper_vs_reproduced.md",
    "paper_vs_reproduced.json")]
AUDITED_TABLES += [f"figures/tables/{{model}}/block_{name}.{ext}" for name in ("summary", "vs_paper", "certificate")
                   for ext in ("csv", "md")] + ["figures/tables/{model}/block_measured.json"] if BLOCK_TRANSITIONS else []
AUDITED_TABLES += ["figures/tables/{model}/long_context.md", "figures/tables/{model}/long_context_measured.json"] \
    if LC else []


rule audit:
    input:
        run_config="data/run/{model}/config.yaml",
        certificate_records="data/audit/{model}/certificate_records.csv",
        weights=expand("data/extract/{{model}}/layer{layer}.npz", layer=LAYERS),
        long_context_tokens=["data/long_context/{model}/layer_tokens.npz"] if LC else [],
        prompts=config["prompts"],
        passage=[LC.get("passage", "data/long_context_passage.txt")] if LC else [],
        row_tables=expand("data/baselines/{{model}}/layer{layer}.csv", layer=LAYERS),
        summary_tables=AUDITED_TABLES,
        measured=["figures/tables/{model}/method_checks_measured.json"] + MINIP_MEASURED,
        claims="data/paper_claims.yaml",
    output:
        csv="figures/tables/{model}/audit.csv",
        md="figures/tables/{model}/audit.md",
    params:
        model=MODEL_CFG,
        code=code("audit.py"),
    threads: 1
    priority: priority_of("audit")
    conda:
        "../../environment.yml"
    resources:
        mem_mb=2000,
        runtime=10,
    log:
        "data/logs/{model}/audit.log",
    benchmark:
        "benchmarks/{model}/audit.tsv"
    script:
        "../scripts/audit.py"
