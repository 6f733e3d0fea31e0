"""Snakemake entry point: one summary table as an HTML page of the report (attncert.reporting.report_pages)."""
from pathlib import Path

from attncert.integrity.file_integrity import atomic_path
from attncert.integrity.intermediate_check import expect_model_of
from attncert.model.model_source import model_label
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_sidecar
from attncert.reporting.report_pages import table_page

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
page = table_page(sm.input.table, sm.params.about, model_label(sm.params.model))
with atomic_path(sm.output.html) as tmp:
    Path(tmp).write_text(page, encoding="utf-8")
write_sidecar(sm.output.html, provenance(sm.params, stage=f"report_table:{sm.wildcards.page}", inputs=[sm.input.table]))
