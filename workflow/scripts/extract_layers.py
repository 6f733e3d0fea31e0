"""Snakemake entry point: extraction stage, one layer per job (see attncert.model.extraction)."""
import logging
import sys

import numpy as np

from attncert.configuration.config import read_prompts
from attncert.model.extraction import extract_layers, load_model, tokenize_prompts
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.checkpoint_files import checkpoint_provenance
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
p = sm.params
L = int(sm.wildcards.layer)
loaded = load_model(p.model)
prompts = read_prompts(sm.input.prompts, p.n_prompts)
token_ids = tokenize_prompts(loaded.tokenizer, prompts, p.max_tokens)
logging.info("model %s (%s) from %s; token ids %s", p.model["name"], loaded.family, loaded.resolved, token_ids.shape)
n_layers = loaded.model.config.num_hidden_layers
if L >= n_layers:
    sys.exit(
        f"attncert: config key 'layers': index {L} out of range, the model has {n_layers}; fix: use 0..{n_layers - 1}"
    )
arrays = extract_layers(loaded.model, loaded.family, token_ids, [L])[L]
with atomic_path(sm.output.npz) as tmp:
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)
write_sidecar(sm.output.npz, provenance(
    p, stage="extract", layer=L, family=loaded.family, resolved_source=loaded.resolved,
    revision=loaded.revision, prompts=prompts, prompt_token_ids=token_ids.tolist(),
    arrays={k: list(np.shape(v)) for k, v in arrays.items()},
    **checkpoint_provenance(p.model, loaded.revision),
    normalized_token=("ln_1(residual) of the block" if loaded.family == "gpt2"
                      else "residual entering the layer (output of the previous LayerNorm)")))
logging.info("layer %d written to %s", L, sm.output.npz)
