"""Snakemake entry point: one Min-IP figure (PDF + PNG); params.what names it."""
import json
import logging

import pandas as pd

from attncert.minip import plots
from attncert.minip.sweep import MAX_ERR_CRITERION, criterion_label, criterion_transitions
from attncert.minip.tables import transition_table
from attncert.pipeline.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
runs = pd.read_csv(sm.input.sweep)
threshold = sm.params.threshold
if sm.params.what == "witness":
    plots.witness_figure(runs, json.loads(open(sm.input.bound).read()), sm.output.pdf, sm.output.png)
elif sm.params.what == "scaling":
    plots.scaling_figure(runs, threshold, sm.output.pdf, sm.output.png)
elif sm.params.what == "transition":
    plots.transition_figure(transition_table(runs, threshold), threshold, sm.output.pdf, sm.output.png)
elif sm.params.what == "thresholds":
    levels = list(sm.params.thresholds)
    criteria = [criterion_label(p) for p in levels] + [MAX_ERR_CRITERION]
    plots.threshold_figure(criterion_transitions(runs, levels), criteria, sm.output.pdf, sm.output.png)
else:
    raise SystemExit(f"attncert: unknown Min-IP figure {sm.params.what!r}")
for out in sm.output:
    write_sidecar(out, provenance(sm.config, stage=f"minip_figure:{sm.params.what}", model_id="minip",
                                  inputs=[str(p) for p in sm.input], params=dict(sm.params.items())))
logging.info("figure %s written", sm.params.what)
