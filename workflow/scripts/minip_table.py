"""Snakemake entry point: one Min-IP table (CSV + Markdown); wildcards.table names it."""
import json
import logging

import pandas as pd

from attncert.minip import tables
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import claim_dicts
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
which, threshold = sm.wildcards.table, sm.params.threshold
out = dict(csv_path=sm.output.csv, md_path=sm.output.md)
if which == "constructions":
    df = pd.read_csv(verify_intermediate(sm.input.constructions))
    df["rank"] = df["rank"].astype("Int64")
    tables.write_table(df, title="Min-IP constructions, checked exhaustively", notes=[
        "Every sequence of N tokens from {0,1}^m; error = fraction of positions with |y - t| >= 1/2.",
        "rank-1 kernel at N = 3 is the contrast row (no guarantee); the witness rows check the rank-(S+1) and rank-S "
        "constructions on every input of the family: its minimal rank lies in [proven bound, S]."], **out)
else:
    runs = pd.read_csv(verify_intermediate(sm.input.sweep))
    bound = json.loads(verify_intermediate(sm.input.bound).read_text())
    if which == "witness":
        tables.write_table(tables.witness_table(runs, bound), title="Min-IP witness suite: error vs feature rank",
                           notes=tables.witness_notes(bound), **out)
    elif which == "witness_maxerr":
        tables.write_table(tables.witness_maxerr_table(runs, bound), notes=tables.witness_notes(bound), **out,
                           title="Min-IP witness suite: largest |y - t| vs feature rank (the paper's metric)")
    elif which == "thresholds":
        tables.write_table(tables.threshold_table(runs, list(sm.params.thresholds)), notes=tables.THRESHOLD_NOTES,
                           title="Min-IP transition rank under each criterion (how much the threshold decides)", **out)
    elif which == "transition":
        tables.write_table(tables.transition_table(runs, threshold), title="Min-IP transition rank vs problem size",
                           notes=tables.transition_notes(threshold), **out)
    elif which == "paper":
        claims = claim_dicts(sm.input.claims, "paper_b")
        tables.write_table(tables.paper_table(runs, bound, claims, threshold), notes=tables.PAPER_NOTES, **out,
                           title="Min-IP: the paper's numbers and ours")
    else:
        raise SystemExit(f"attncert: unknown Min-IP table {which!r}")
for path in sm.output:
    write_sidecar(path, provenance(sm.params, stage=f"minip_table:{which}", model_id="minip",
                                   inputs=[str(p) for p in sm.input]))
logging.info("table %s written", which)
