"""Snakemake entry point: merge the per-transition block-residual tables into units.csv."""
import logging

import pandas as pd

from attncert.pipeline.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
df = pd.concat([pd.read_csv(p) for p in sm.input.tables], ignore_index=True)
df = df.sort_values(["transition", "head", "radius"]).reset_index(drop=True)
with atomic_path(sm.output.units) as tmp:
    df.to_csv(tmp, index=False, float_format="%.17g")
write_sidecar(sm.output.units, provenance(
    sm.config, stage="block_merge", inputs=list(sm.input.tables), rows=int(len(df)),
    units=int(df.groupby(["transition", "head"]).ngroups), seeds={"block_seed": sm.config["block"]["seed"]},
    status_counts=df["status"].value_counts().to_dict()))
logging.info("merged %d rows from %d transitions", len(df), len(sm.input.tables))
