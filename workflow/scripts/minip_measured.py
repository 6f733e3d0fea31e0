"""Snakemake entry point: the Min-IP values compared with the paper in paper_vs_reproduced.

Keys: the original claim ids (`measured.paper_measurements`) and the same questions in the paper's
own metric, largest |y - t|, plus the transition rank per criterion (`measured.maxerr_measurements`).
"""
import json

import pandas as pd

from attncert.minip.measured import construction_measurements, maxerr_measurements, paper_measurements
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import write_measured
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
runs = pd.read_csv(verify_intermediate(sm.input.sweep))
bound = json.loads(verify_intermediate(sm.input.bound).read_text())
constructions = pd.read_csv(verify_intermediate(sm.input.constructions))
grid = (
    f"Min-IP {sm.params.grid} sweep: witness suite ({bound['family_size']} inputs, {bound['bits']}-bit), "
    f"random pools m ∈ {sorted(runs.loc[runs.setting != 'witness', 'bits'].dropna().unique().astype(int).tolist())}, "
    f"{runs['seed'].nunique()} seeds"
)
values = {**paper_measurements(runs, bound, sm.params.threshold), **construction_measurements(constructions, bound),
          **maxerr_measurements(runs, bound, constructions, list(sm.params.thresholds))}
write_measured(sm.output[0], values, grid)
write_sidecar(sm.output[0], provenance(sm.params, stage="minip_measured", model_id="minip",
                                       inputs=[str(p) for p in sm.input]))
