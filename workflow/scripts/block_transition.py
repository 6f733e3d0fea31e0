"""Snakemake entry point: the block-residual units of one transition l -> l+1 (attncert.block.residual)."""
import logging
import sys
import time

import numpy as np
import torch
from tqdm import tqdm

from attncert.block.build import transition_from_arrays
from attncert.head.specification import specification_rows
from attncert.block.certificate import certificate_file_arrays
from attncert.block.residual import analyze_transition, transition_table
from attncert.model.extraction import load_layer
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar
from attncert.model.model_source import model_label

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
torch.set_num_threads(sm.threads)
p, b = sm.params, sm.params.block
L = int(sm.wildcards.transition)
prompt, position = int(b["prompt"]), int(b["query_position"])
arrays, nxt = load_layer(sm.input.npz), load_layer(sm.input.next)
tr = transition_from_arrays(arrays, nxt, L, prompt, position)
heads = list(p.heads)
C = specification_rows(nxt["W_V"], nxt["W_O"], L + 1, heads, prompt, position, p.spec_seed)
logging.info("transition %d -> %d (%s): %d heads, %d attended keys, d = %d, radii %s", L, L + 1, tr.family,
             len(heads), len(tr.keys), tr.d, b["radii"])
phases = tqdm(total=7 + bool(b.get("alpha_crown", False)), desc=f"block transition {L}", file=sys.stderr)
t0 = time.perf_counter()
stored = {}
rows, timings = analyze_transition(
    tr, C, b["radii"], qp_starts=b["qp_starts"], sdp_iterations=b["sdp_iterations"],
    ascent_restarts=b["ascent_restarts"], ascent_steps=b["ascent_steps"], seed=b["seed"],
    sdp_rounding_starts=b["sdp_rounding_starts"],
    alpha_crown=b["alpha_crown"], reference=nxt["Z"][prompt, position],
    keep=stored, progress=lambda name: (phases.update(1), logging.info("phase %s done", name)))
phases.close()
df = transition_table(rows, timings, tr, heads, model_label(p.model), prompt)
with atomic_path(sm.output.csv) as tmp:
    df.to_csv(tmp, index=False, float_format="%.17g")
with atomic_path(sm.output.certificates) as tmp:
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **certificate_file_arrays(stored["certificate"], heads))
write_sidecar(sm.output.certificates, provenance(p, stage="block_transition", transition=L,
                                                 inputs=[str(sm.input.npz), str(sm.input.next)]))
write_sidecar(sm.output.csv, provenance(
    p, stage="block_transition", seeds={"block_seed": b["seed"], "spec_seed": p.spec_seed}, transition=L,
    inputs=[str(sm.input.npz), str(sm.input.next)], units=int(len(df)), cpu_seconds=timings,
    status_counts=df["status"].value_counts().to_dict(), wall_seconds=time.perf_counter() - t0))
logging.info("transition %d: %d rows, status %s, cpu seconds %s", L, len(df), df["status"].value_counts().to_dict(),
             timings)
