"""Snakemake entry point: the audit's certificate part, every certified number of the model's row tables re-derived
from its stored certificate and the weights (attncert.audit), written as records for the final audit job."""
import time
from pathlib import Path

from attncert.audit.audit_table import audit_model, recorded_coverage, write_records
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
model = sm.wildcards.model
coverage = recorded_coverage(Path("data"), model)  # the run's recorded configuration, as `attncert audit` reads it
t0 = time.perf_counter()
stage_seconds: dict = {}
records = audit_model(Path("data"), model, coverage.layers, coverage=coverage, stage_seconds=stage_seconds,
                      parts=("certificates",))
seconds = time.perf_counter() - t0
write_records(records, Path(sm.output.records))
write_sidecar(sm.output.records, provenance(sm.params, stage="audit_certificates", seconds=seconds,
                                            stage_seconds=stage_seconds, rows=len(records)))
