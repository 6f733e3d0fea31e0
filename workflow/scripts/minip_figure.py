"""Snakemake entry point: one Min-IP figure (PDF + PNG); params.what names it."""
import json
import logging

import pandas as pd

from attncert.minip import plots
from attncert.minip.tables import transition_table

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
else:
    raise SystemExit(f"attncert: unknown Min-IP figure {sm.params.what!r}")
logging.info("figure %s written", sm.params.what)
