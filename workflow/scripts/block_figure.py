"""Snakemake entry point: one block-residual figure (attncert.block.figures)."""
import pandas as pd

from attncert.block import figures, report
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import claim_dicts
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
df = report.derive(pd.read_csv(verify_intermediate(sm.input.units)))
figures.draw(sm.wildcards.block_figure, df, sm.params.block, claim_dicts(sm.input.claims, "paper_a"), sm.output.pdf,
             sm.output.png)
for out in sm.output:
    write_sidecar(
        out, provenance(sm.params, stage=f"block_figure:{sm.wildcards.block_figure}", grid=report.grid_label(df))
    )
