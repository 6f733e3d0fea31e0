"""Snakemake entry point: the Min-IP values compared with the paper in paper_vs_reproduced."""
import json

import pandas as pd

from attncert.pipeline.job_log import start_job_log
from attncert.minip.tables import paper_measurements
from attncert.pipeline.paper_comparison import write_measured

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
runs = pd.read_csv(sm.input.sweep)
bound = json.loads(open(sm.input.bound).read())
grid = (f"Min-IP default sweep: witness suite ({bound['family_size']} inputs, {bound['bits']}-bit), "
        f"random pools m ∈ {sorted(runs.loc[runs.setting != 'witness', 'bits'].dropna().unique().astype(int).tolist())}, "
        f"{runs['seed'].nunique()} seeds")
write_measured(sm.output[0], paper_measurements(runs, bound, sm.params.threshold), grid)
