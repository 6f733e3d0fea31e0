"""Snakemake entry point: the run's overview, the report's first item and landing page
(attncert.reporting.run_overview)."""
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_sidecar
from attncert.reporting.run_overview import overview, write_overview

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
ov = overview(sm.input.config, list(sm.input.benchmarks), sm.input.verdicts, sm.input.audit,
              configfiles=sm.params.configfiles, overrides=sm.params.overrides)
write_overview(ov, sm.output.md, sm.output.html)
record = provenance(sm.params, stage="run_overview", inputs=[sm.input.config, sm.input.verdicts, sm.input.audit])
for out in sm.output:
    write_sidecar(out, record)
