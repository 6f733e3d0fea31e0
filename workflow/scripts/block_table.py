"""Snakemake entry point: the block-residual tables (attncert.block.report)."""
import pandas as pd

from attncert.block import report
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import claim_dicts, write_measured
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
block = sm.params.block
df = report.derive(pd.read_csv(verify_intermediate(sm.input.units)))
label = report.grid_label(df)
r_ref, _ = report.at_reference(df, block)
report.write_table(
    report.summary_table(df),
    sm.output.summary,
    sm.output.summary_md,
    f"Block residual per radius — {label}",
    [
        "Spearman ρ: CROWN looseness vs predicted looseness over the units at that radius (scipy.stats.spearmanr).",
        "second_order_dev = ascent max / best-found second-order maximum − 1; crown_ge_ascent counts sound rows.",
    ],
)
report.write_table(report.paper_table(df, block, claim_dicts(sm.input.claims, "paper_a")), sm.output.paper,
                   sm.output.paper_md, f"Paper A block residual experiment (GPT-2 small) vs ours — {label}",
                   ["Paper values from data/paper_claims.yaml (paper_a, block_*). Ours: this run; embedded-model "
                    "results are not GPT-2 results.", f"Rank correlations at r = {r_ref:g}."])
report.write_table(report.certificate_table(df), sm.output.certificate, sm.output.certificate_md,
                   f"Block certificate vs CROWN and α-CROWN per radius (beyond the paper) — {label}",
                   report.CERTIFICATE_NOTES)
write_measured(sm.output.measured, report.measured_values(df, block), label)
for out in sm.output:
    write_sidecar(out, provenance(sm.params, stage="block_table", inputs=[str(sm.input.units)], grid=label))
