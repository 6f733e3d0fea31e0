"""Snakemake entry point: merge the per-transition block-residual tables into units.csv."""
import logging

from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar
from attncert.reporting.report_files import load_tables

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
df = load_tables(sm.input.tables).sort_values(["transition", "head", "radius"]).reset_index(drop=True)
with atomic_path(sm.output.units) as tmp:
    df.to_csv(tmp, index=False, float_format="%.17g")
write_sidecar(sm.output.units, provenance(
    sm.params, stage="block_merge", inputs=list(sm.input.tables), rows=int(len(df)),
    units=int(df.groupby(["transition", "head"]).ngroups), status_counts=df["status"].value_counts().to_dict()))
logging.info("merged %d rows from %d transitions", len(df), len(sm.input.tables))
