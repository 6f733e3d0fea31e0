"""Snakemake entry point: audit every certified number of the model's tables (attncert.audit)."""
import sys
import time
from pathlib import Path

from attncert.audit.audit_table import audit_model, write_audit
from attncert.audit.run_configuration import read_run_configuration
from attncert.audit.table_coverage import CoverageConfig
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
model = sm.wildcards.model
# the run's recorded configuration, the same file `attncert audit` reads (its values are this job's params too)
coverage = CoverageConfig.from_config(read_run_configuration(Path("data"), model))
layers = coverage.layers
t0 = time.perf_counter()
stage_seconds: dict = {}
records = audit_model(Path("data"), model, layers, coverage=coverage, stage_seconds=stage_seconds)
seconds = time.perf_counter() - t0
write_audit(records, Path(sm.output.csv), Path(sm.output.md), model, seconds, layers, coverage, stage_seconds)
fails = [r for r in records if r["status"] == "fail"]
for r in fails:
    print(f"attncert: AUDIT FAILURE {r['table']} layer {r['layer']} row {r['row']} {r['number']}: {r['check']} "
          f"(margin {r['margin']:.3g}) {r['reason']}", file=sys.stderr)
counts = {s: sum(r["status"] == s for r in records) for s in ("pass", "fail", "not applicable", "not covered")}
for out in (sm.output.csv, sm.output.md):
    write_sidecar(out, provenance(sm.params, stage="audit", seconds=seconds, stage_seconds=stage_seconds,
                                  counts=counts))
