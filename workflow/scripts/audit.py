"""Snakemake entry point: audit every certified number of the model's certification tables (attncert.audit)."""
import sys
import time
from pathlib import Path

from attncert.audit.audit_table import audit_layer, write_audit
from attncert.pipeline.job_log import start_job_log
from attncert.pipeline.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
model = sm.wildcards.model
t0 = time.perf_counter()
records = [rec for layer in sm.params.layers for rec in audit_layer(Path("data"), model, int(layer))]
seconds = time.perf_counter() - t0
write_audit(records, Path(sm.output.csv), Path(sm.output.md), model, seconds, list(sm.params.layers))
fails = [r for r in records if r["status"] == "fail"]
for r in fails:
    print(f"attncert: AUDIT FAILURE layer {r['layer']} row {r['row']} {r['number']}: {r['check']} "
          f"(margin {r['margin']:.3g}) {r['reason']}", file=sys.stderr)
counts = {s: sum(r["status"] == s for r in records) for s in ("pass", "fail", "not certifiable", "not applicable")}
write_sidecar(sm.output.csv, provenance(sm.params, stage="audit", seconds=seconds, counts=counts))
write_sidecar(sm.output.md, provenance(sm.params, stage="audit", seconds=seconds, counts=counts))
