"""Snakemake entry point: the audit of the run (attncert.audit): the certificate part's records (job
audit_certificates), the extracted weights against the checkpoint and every summary table recomputed from the row
tables; writes audit.csv and audit.md."""
import json
import sys
from pathlib import Path

from attncert.audit.audit_table import audit_model, read_records, recorded_coverage, write_audit
from attncert.integrity.file_integrity import sidecar_path
from attncert.integrity.intermediate_check import expect_model_of, verify_intermediate
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
model = sm.wildcards.model
coverage = recorded_coverage(Path("data"), model)
part = verify_intermediate(sm.input.certificate_records)
stage_seconds = dict(json.loads(sidecar_path(part).read_text()).get("stage_seconds", {}))
records = read_records(part)
records += audit_model(Path("data"), model, coverage.layers, coverage=coverage, stage_seconds=stage_seconds,
                       parts=("weights", "tables"))
seconds = sum(stage_seconds.values())  # both jobs' audit time: certificates, weights, summary tables
write_audit(records, Path(sm.output.csv), Path(sm.output.md), model, seconds, coverage.layers, coverage,
            stage_seconds)
fails = [r for r in records if r["status"] == "fail"]
for r in fails:
    print(f"attncert: AUDIT FAILURE {r['table']} layer {r['layer']} row {r['row']} {r['number']}: {r['check']} "
          f"(margin {r['margin']:.3g}) {r['reason']}", file=sys.stderr)
counts = {s: sum(r["status"] == s for r in records) for s in ("pass", "fail", "not applicable", "not covered")}
for out in (sm.output.csv, sm.output.md):
    write_sidecar(out, provenance(sm.params, stage="audit", seconds=seconds, stage_seconds=stage_seconds,
                                  counts=counts))
