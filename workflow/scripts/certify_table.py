"""Snakemake entry point: the tables of the certification stage (attncert.certify.summary)."""
import sys

from attncert.certify.summary import write_stage_tables
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import write_measured
from attncert.provenance.provenance import provenance, write_sidecar
from attncert.reporting.report_files import load_tables
from attncert.model.model_source import model_label

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
label, measured, n_violations = write_stage_tables(
    load_tables(sm.input.tables), model_label(sm.params.model), sm.output
)
write_measured(sm.output.measured, measured, label)
if n_violations:
    print(f"attncert: {n_violations} SOUNDNESS VIOLATIONS, see {sm.output.violations}", file=sys.stderr)
for out in sm.output:
    write_sidecar(out, provenance(sm.params, stage="certify_table", inputs=list(sm.input.tables), grid=label))
