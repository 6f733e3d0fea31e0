"""Snakemake entry point: the baseline figure (attncert.baselines.figures)."""
from attncert.baselines.comparison import merge
from attncert.baselines.figures import figure_gap_vs_radius
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import claim_dicts
from attncert.provenance.provenance import provenance, write_sidecar
from attncert.reporting.report_files import grid_label, load_tables
from attncert.model.model_source import model_label

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
base = load_tables(sm.input.baselines)
label = grid_label(base.drop(columns=["method"]).drop_duplicates(), model_label(sm.params.model))
figure_gap_vs_radius(
    merge(base, load_tables(sm.input.cert)), label, sm.output.pdf, claims=claim_dicts(sm.input.claims, "paper_a")
)
for out in sm.output:
    write_sidecar(out, provenance(sm.params, stage="baselines_figure", grid=label))
