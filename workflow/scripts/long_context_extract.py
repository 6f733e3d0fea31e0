"""Snakemake entry point: the passage's normalized tokens at every context length (attncert.model.extraction)."""
import numpy as np

from attncert.model.extraction import extract_lengths, load_model
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.checkpoint_files import checkpoint_provenance
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
p = sm.params
loaded = load_model(p.model)
text = open(sm.input.passage, encoding="utf-8").read()
arrays = extract_lengths(loaded, text, list(p.lengths), int(p.layer))
with atomic_path(sm.output.npz) as tmp:
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)
write_sidecar(sm.output.npz, provenance(p, stage="long_context_extract", passage=sm.input.passage,
                                        resolved_source=loaded.resolved, family=loaded.family,
                                        revision=loaded.revision, **checkpoint_provenance(p.model, loaded.revision),
                                        arrays={k: list(np.shape(v)) for k, v in arrays.items()}))
