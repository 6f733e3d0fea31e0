"""Snakemake entry point: one Min-IP figure (PDF + PNG) named by the wildcard (attncert.minip.figures)."""
import json
import logging

import pandas as pd

from attncert.minip.figures import draw
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import claim_dicts
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
name = sm.wildcards.minip_figure
bound = json.loads(verify_intermediate(sm.input.bound).read_text()) if "bound" in sm.input.keys() else None
claims = claim_dicts(sm.input.claims, "paper_b") if "claims" in sm.input.keys() else None
sweep = pd.read_csv(verify_intermediate(sm.input.sweep))
draw(name, sweep, bound, sm.params.threshold, list(sm.params.thresholds), sm.output.pdf, sm.output.png, claims)
for out in sm.output:
    write_sidecar(out, provenance(sm.params, stage=f"minip_figure:{name}", model_id="minip",
                                  inputs=[str(p) for p in sm.input]))
logging.info("figure %s written", name)
