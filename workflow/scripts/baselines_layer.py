"""Snakemake entry point: IBP / CROWN / alpha-CROWN upper bounds for every baseline unit of a layer."""
import logging
import sys

import pandas as pd
import torch

from attncert.baselines.layer import attained_by_unit, bound_layer
from attncert.certify.second_order.certificate import second_order_certificate
from attncert.head.units import load_specification
from attncert.configuration.device import DeviceError, resolve_device
from attncert.model.extraction import load_layer
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
torch.set_num_threads(sm.threads)
p = sm.params
try:
    resolve_device(p.device)
except DeviceError as e:
    sys.exit(f"attncert: {e}")
layer = int(sm.wildcards.layer)
spec, qps = load_specification(sm.input.spec)
grid = {k: list(p[k]) for k in ("heads", "prompts", "query_positions", "norms", "modes", "radii")}
attained = attained_by_unit(pd.read_csv(verify_intermediate(sm.input.cert)))
df = bound_layer(load_layer(sm.input.npz), spec, qps, layer, grid, list(p.methods), attained, alpha=dict(p.alpha),
                 device=p.device, certificate=second_order_certificate)  # timed beside the baselines (seconds_beside)
with atomic_path(sm.output.csv) as tmp:
    df.to_csv(tmp, index=False, float_format="%.17g")
write_sidecar(sm.output.csv, provenance(
    p, stage="baselines", layer=layer, units=len(df), labels=sorted(set(df["label"])),
    status_counts=df["status"].str.split(":").str[0].value_counts().to_dict(), spec_file=str(sm.input.spec)))
logging.info("layer %d: %d rows", layer, len(df))
