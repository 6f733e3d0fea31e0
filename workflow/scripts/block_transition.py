"""Snakemake entry point: the block-residual units of one transition l -> l+1 (attncert.block.residual)."""
import logging
import sys
import time

import pandas as pd
import torch
from tqdm import tqdm

from attncert.block.map import specification_rows, transition_from_model
from attncert.block.residual import analyze_transition
from attncert.pipeline.extraction import load_layer, load_model
from attncert.pipeline.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
logging.basicConfig(filename=sm.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
torch.set_num_threads(sm.threads)
cfg, b = sm.config, sm.params.block
L = int(sm.wildcards.transition)
prompt, position = int(b["prompt"]), int(b["query_position"])
arrays, nxt = load_layer(sm.input.npz), load_layer(sm.input.next)
# The extraction holds only the attention weights: the MLP and LayerNorm weights come from the model.
loaded = load_model(cfg["model"])
tr = transition_from_model(loaded.model, loaded.family, L, arrays["residual"][prompt], position)
heads = list(sm.params.heads)
C = specification_rows(nxt["W_V"], nxt["W_O"], L + 1, heads, prompt, position, cfg["spec_seed"])
logging.info("transition %d -> %d (%s): %d heads, %d attended keys, d = %d, radii %s", L, L + 1, loaded.family,
             len(heads), len(tr.keys), tr.d, b["radii"])
phases = tqdm(total=5, desc=f"block transition {L}", file=sys.stderr)
t0 = time.perf_counter()
rows, timings = analyze_transition(
    tr, C, b["radii"], qp_starts=b["qp_starts"], sdp_iterations=b["sdp_iterations"],
    ascent_restarts=b["ascent_restarts"], ascent_steps=b["ascent_steps"], seed=b["seed"],
    reference=nxt["Z"][prompt, position], progress=lambda name: (phases.update(1), logging.info("phase %s done", name)))
phases.close()
df = pd.DataFrame(rows)
df.insert(0, "model", cfg["model"]["name"])
df.insert(1, "family", loaded.family)
df.insert(2, "transition", L)
df.insert(3, "layer_next", L + 1)
df.insert(4, "head", [heads[u] for u in df.pop("unit")])
df.insert(5, "prompt", prompt)
df.insert(6, "position", position)
df.insert(7, "n_keys", len(tr.keys))
df.insert(8, "d", tr.d)
for name, sec in timings.items():
    df[f"cpu_seconds_{name}"] = sec
bad = df[df["status"] != "ok"]
for _, r in bad.iterrows():
    logging.error("%s: head %d radius %g crown %r ascent %r", r["status"], r["head"], r["radius"], r["crown_upper"], r["ascent_max"])
    if r["status"] == "UNSOUND":
        print(f"attncert: SOUNDNESS VIOLATION block transition {L} head {r['head']} r={r['radius']}", file=sys.stderr)
with atomic_path(sm.output.csv) as tmp:
    df.to_csv(tmp, index=False, float_format="%.17g")
write_sidecar(sm.output.csv, provenance(
    cfg, stage="block_transition", seeds={"block_seed": b["seed"], "spec_seed": cfg["spec_seed"]},
    transition=L, inputs=[str(sm.input.npz), str(sm.input.next)], resolved_source=loaded.resolved,
    revision=loaded.revision, weights="attention weights and residual stream from the extraction npz; MLP and "
    "LayerNorm weights loaded from the model (transformers) by this job", units=int(len(df)),
    status_counts=df["status"].value_counts().to_dict(), cpu_seconds=timings,
    wall_seconds=time.perf_counter() - t0, block=dict(b), heads=heads))
logging.info("transition %d: %d rows, status %s, cpu seconds %s", L, len(df), df["status"].value_counts().to_dict(), timings)
