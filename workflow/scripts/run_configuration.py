"""Snakemake entry point: the run's configuration as Snakemake merged it, with the layers, heads and block
transitions the workflow resolved for the model (attncert.audit.run_configuration): what `attncert audit` checks
the run against when no --configfile is given."""
from attncert.audit.run_configuration import write_run_configuration
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
write_run_configuration(sm.output.config, dict(sm.params.config), dict(sm.params.resolved))
write_sidecar(sm.output.config, provenance(sm.params, stage="run_configuration"))
