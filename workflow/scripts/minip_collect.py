"""Snakemake entry point: all Min-IP run records -> one CSV (data/minip/sweep.csv)."""
import json
import logging

from attncert.minip.sweep import collect
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
records = [json.loads(verify_intermediate(p).read_text()) for p in sm.input.runs]
df = collect(records)
logging.info("%d runs collected", len(df))
with atomic_path(sm.output.csv) as tmp:
    df.to_csv(tmp, index=False)
write_sidecar(sm.output.csv, provenance(sm.params, stage="minip_collect", model_id="minip",
                                        seeds={"runs": list(sm.params.seeds)}, runs=len(df)))
