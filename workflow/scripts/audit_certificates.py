"""Snakemake entry point: one piece of the audit's certificate part (a certification layer, the long-context table,
the block table's own checks or one block transition; attncert.audit.certificate_pieces), every certified number
of it re-derived from its stored certificate and the weights, written as records for audit_certificates_merge."""
import time
from pathlib import Path

from attncert.audit.audit_table import audit_certificate_part, recorded_coverage, write_records
from attncert.audit.certificate_pieces import part_stage
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
model = sm.wildcards.model
part = sm.params.part
coverage = recorded_coverage(Path("data"), model)  # the run's recorded configuration, as `attncert audit` reads it
t0 = time.perf_counter()
records = audit_certificate_part(Path("data"), model, part, coverage=coverage)
seconds = time.perf_counter() - t0
write_records(records, Path(sm.output.records))
write_sidecar(sm.output.records, provenance(sm.params, stage="audit_certificates", part=part, seconds=seconds,
                                            stage_seconds={part_stage(part): seconds}, rows=len(records)))
