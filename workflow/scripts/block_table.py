"""Snakemake entry point: the block-residual tables (attncert.block.report)."""
import pandas as pd

from attncert.block import report
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import claim_dicts, write_measured
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
label, tables, measured = report.stage_tables(pd.read_csv(verify_intermediate(sm.input.units)), sm.params.block,
                                              claim_dicts(sm.input.claims, "paper_a"))
for key in report.STAGE_TABLE_KEYS:
    frame, title, notes = tables[key]
    report.write_table(frame, getattr(sm.output, key), getattr(sm.output, f"{key}_md"), title, notes)
write_measured(sm.output.measured, measured, label)
for out in sm.output:
    write_sidecar(out, provenance(sm.params, stage="block_table", inputs=[str(sm.input.units)], grid=label))
