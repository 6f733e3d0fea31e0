"""Snakemake entry point: IBP / CROWN / alpha-CROWN upper bounds for every baseline unit of a layer.

One row per unit and method; a row without a bound keeps its one-line reason in `status`."""
import itertools
import logging
import sys

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from attncert.baselines.comparison import KEYS
from attncert.baselines.linear_bound_baselines import baseline_upper_bounds
from attncert.certify.units import Unit, head_problem
from attncert.pipeline.extraction import load_layer
from attncert.pipeline.unit_tables import attained_value, below_attained
from attncert.pipeline.job_log import start_job_log
from attncert.pipeline.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
torch.set_num_threads(sm.threads)
cfg, p = sm.config, sm.params
layer = int(sm.wildcards.layer)
arrays = load_layer(sm.input.npz)
with np.load(sm.input.spec) as s:
    spec, qps = s["c"], [int(q) for q in s["query_positions"]]
cert = pd.read_csv(sm.input.cert)
cert["radius"] = cert["radius"].round(12)
attained = dict(zip(map(tuple, cert[KEYS].itertuples(index=False, name=None)), attained_value(cert)))

rows = []
groups = list(itertools.product(p.heads, p.prompts, p.query_positions, p.norms, p.modes))
for h, pr, qp, norm, mode in tqdm(groups, desc=f"baselines layer {layer}", file=sys.stderr, mininterval=5):
    units = [Unit(layer, h, pr, qp, float(r), norm, mode) for r in p.radii]
    problems = [head_problem(arrays, spec, qps, u) for u in units]
    for method in p.methods:
        for u, res in zip(units, baseline_upper_bounds(problems, method)):
            key = (u.layer, u.head, u.prompt, u.query_pos, u.norm, u.mode, round(u.radius, 12))
            ref = attained.get(key, np.nan)
            status = res.status
            if status == "ok" and below_attained(res.upper, ref):
                status = f"UNSOUND: upper {res.upper!r} < attained {ref!r}"
                logging.error("%s %s %s", u, method, status)
                print(f"attncert: SOUNDNESS VIOLATION {u} {method}: {status}", file=sys.stderr)
            if status != "ok" and not status.startswith("UNSOUND"):
                logging.warning("%s %s: no bound (%s)", u, method, status)
            rows.append({**u.key(), "method": method, "upper": res.upper, "attained": ref,
                         "seconds": res.seconds, "status": status, "label": res.label})
df = pd.DataFrame(rows)
with atomic_path(sm.output.csv) as tmp:
    df.to_csv(tmp, index=False, float_format="%.17g")
write_sidecar(sm.output.csv, provenance(
    cfg, stage="baselines", layer=layer, units=len(df), status_counts=df["status"].str.split(":").str[0].value_counts().to_dict(),
    labels=sorted(set(df["label"])), seeds={"spec_seed": cfg["spec_seed"]}, spec_file=str(sm.input.spec)))
logging.info("layer %d: %d rows", layer, len(df))
