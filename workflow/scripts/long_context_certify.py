"""Snakemake entry point: certify the long-context units of one head at a group of lengths
(attncert.certify.long_context_jobs) and store the certificate of every certified number
(attncert.certify.long_context, attncert.certify.certificate_store); the long_context_merge job joins the parts into
units.csv (attncert.certify.long_context_parts)."""
import torch

from attncert.certify.certificate_store import write_certificates
from attncert.certify.long_context import certify_long_context, long_context_problems
from attncert.model.extraction import load_layer
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
p = sm.params
torch.set_num_threads(sm.threads)
arrays = load_layer(sm.input.npz)
problems = long_context_problems(arrays, int(p.layer), [int(T) for T in p.lengths], [int(p.head)], p.query_position,
                                 list(p.radii), list(p.norms), int(p.spec_seed), list(p.modes))
df, entries, pool = certify_long_context(
    problems, ascent_restarts=p.ascent_restarts, ascent_steps=p.ascent_steps, seed=p.seed, tight=p.tight
)
with atomic_path(sm.output.csv) as tmp:
    df.to_csv(tmp, index=False, float_format="%.17g")
write_certificates(sm.output.certificates, entries, pool)
for out in (sm.output.csv, sm.output.certificates):
    write_sidecar(out, provenance(p, stage="long_context_certify", units=len(df),
                                  status_counts=df["status"].value_counts().to_dict()))
