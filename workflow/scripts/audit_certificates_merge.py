"""Snakemake entry point: the audit's certificate part, its pieces' records (job audit_certificates, one per
certification layer, the long-context table, the block table's own checks and each block transition) joined in
the order `attncert audit` audits them (attncert.audit.certificate_pieces), for the final audit job."""
import json
import sys
from pathlib import Path

from attncert.audit.audit_table import join_records, recorded_coverage
from attncert.audit.certificate_pieces import block_transitions, certificate_parts
from attncert.audit.table_coverage import AuditInputError
from attncert.integrity.file_integrity import sidecar_path
from attncert.integrity.intermediate_check import expect_model_of, regenerate_command, verify_intermediate
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
model = sm.wildcards.model
coverage = recorded_coverage(Path("data"), model)
parts = list(sm.params.parts)
if parts != certificate_parts(coverage.layers, block_transitions(coverage)):
    print(f"attncert: the audit's pieces {parts} are not those of the recorded configuration's layers "
          f"{coverage.layers} and block transitions {list(block_transitions(coverage))}; fix: regenerate it with: "
          f"snakemake --cores all data/run/{model}/config.yaml --forcerun run_configuration", file=sys.stderr)
    sys.exit(1)
paths = [verify_intermediate(p) for p in sm.input.records]  # a missing or altered piece: one line naming the command
stage_seconds: dict = {}
for p in paths:
    for stage, s in json.loads(sidecar_path(p).read_text()).get("stage_seconds", {}).items():
        stage_seconds[stage] = stage_seconds.get(stage, 0.0) + float(s)
try:
    rows = join_records(paths, Path(sm.output.records),
                        fix=lambda path: f"regenerate it with: {regenerate_command(path)}")
except AuditInputError as e:
    print(f"attncert: {e}", file=sys.stderr)
    sys.exit(1)
write_sidecar(sm.output.records, provenance(sm.params, stage="audit_certificates_merge", seconds=sum(
    stage_seconds.values()), stage_seconds=stage_seconds, rows=rows, parts=[str(p) for p in paths]))
