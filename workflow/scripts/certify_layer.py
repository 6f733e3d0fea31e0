"""Snakemake entry point: certify every unit of one layer (see attncert.certify.run)."""
import logging
import sys

import torch

from attncert.certify.certificate_store import write_certificates
from attncert.certify.layer_run import certify_layer_units
from attncert.head.units import grid, specification_vectors, write_specification
from attncert.model.extraction import load_layer
from attncert.configuration.device import DeviceError, resolve_device
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
p = sm.params
torch.set_num_threads(sm.threads)
try:
    resolve_device(p.device)
except DeviceError as e:
    sys.exit(f"attncert: {e}")
layer = int(sm.wildcards.layer)
arrays = load_layer(sm.input.npz)
qps = list(p.query_positions)
spec = specification_vectors(arrays, layer, qps, p.spec_seed)
write_specification(sm.output.spec, spec, qps, layer, p.spec_seed)
units = grid(p.heads, p.prompts, qps, p.radii, p.norms, p.modes, layer, varying=p.varying)
df, entries, pool = certify_layer_units(arrays, spec, qps, units, layer, ascent_restarts=p.ascent_restarts,
                                       ascent_steps=p.ascent_steps, seed=p.seed, second_order=p.second_order,
                                       tight=p.tight, ascent_check_fraction=p.ascent_check_fraction, device=p.device)
write_certificates(sm.output.certificates, entries, pool)
write_sidecar(sm.output.certificates, provenance(
    p, stage="certify", layer=layer, units=len(df), table=str(sm.output.csv), extract_file=str(sm.input.npz),
    spec_file=str(sm.output.spec), seeds={"spec_seed": p.spec_seed, "ascent_seed": p.seed}))
with atomic_path(sm.output.csv) as tmp:
    df.to_csv(tmp, index=False, float_format="%.17g")
write_sidecar(sm.output.csv, provenance(
    p, stage="certify", layer=layer, units=len(df), status_counts=df["status"].value_counts().to_dict(),
    seeds={"spec_seed": p.spec_seed, "ascent_seed": p.seed}, spec_file=str(sm.output.spec)))
logging.info("layer %d: %d units, status %s", layer, len(df), df["status"].value_counts().to_dict())
