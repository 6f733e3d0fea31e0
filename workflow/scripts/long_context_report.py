"""Snakemake entry point: the long-context figure, table and measured values (attncert.certify.long_context_summary,
long_context_figure)."""
import pandas as pd

from attncert.certify.long_context_figure import figure
from attncert.certify.long_context_summary import grid_label, markdown, summary
from attncert.paper_comparison.claims import load_claims
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.model.model_source import model_label
from attncert.paper_comparison.paper_comparison import write_measured
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
df = pd.read_csv(verify_intermediate(sm.input.csv))
table, measured = summary(df)
label = grid_label(df, model_label(sm.params.model))
claims = load_claims(sm.input.claims).by_id()
paper = {"rel_gap": {r: float(claims[f"second_order_rel_gap_r{r:g}"].value) for r in table["radius"].unique()
                     if f"second_order_rel_gap_r{r:g}" in claims},
         "seconds": {m: float(claims[f"cert_seconds_{m}"].value) for m in ("fixed", "varying")
                     if f"cert_seconds_{m}" in claims}}
embedded = str(sm.params.model.get("source", "embedded")) == "embedded"
figure(table, label, sm.output.pdf, paper, "the embedded model, not GPT-2" if embedded else "")
with open(sm.output.md, "w", encoding="utf-8") as fh:
    fh.write(markdown(table, label))
write_measured(sm.output.measured, measured, label)
for out in (sm.output.pdf, sm.output.png, sm.output.md, sm.output.measured):
    write_sidecar(out, provenance(sm.params, stage="long_context_report", inputs=[sm.input.csv]))
