"""Snakemake entry point: one figure of the certification stage (attncert.certify.figures)."""
from attncert.certify import figures
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import claim_dicts
from attncert.provenance.provenance import provenance, write_sidecar
from attncert.reporting.report_files import load_tables
from attncert.model.model_source import model_label

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
figures.draw(sm.wildcards.certify_figure, load_tables(sm.input.tables), model_label(sm.params.model), sm.output.pdf,
             claims=claim_dicts(sm.input.claims, "paper_a"))
for out in sm.output:
    write_sidecar(
        out, provenance(sm.params, stage=f"certify_figure:{sm.wildcards.certify_figure}", inputs=list(sm.input.tables))
    )
