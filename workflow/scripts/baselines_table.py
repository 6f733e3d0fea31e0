"""Snakemake entry point: the baseline comparison tables (attncert.baselines.comparison)."""
from attncert.baselines.comparison import stage_report
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import write_measured
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar
from attncert.reporting.report_files import load_tables
from attncert.model.model_source import model_label

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
rep = stage_report(load_tables(sm.input.baselines), load_tables(sm.input.cert), model_label(sm.params.model))
write_measured(sm.output.measured, rep["measured"], rep["label"])
for key, out in (("table", sm.output.csv), ("slopes", sm.output.slopes), ("headline", sm.output.headline)):
    with atomic_path(out) as tmp:
        rep[key].to_csv(tmp, index=False)
with atomic_path(sm.output.md) as tmp:
    tmp.write_text(rep["md"])
for out in sm.output:
    write_sidecar(out, provenance(sm.params, stage="baselines_table", method_labels=rep["labels"], grid=rep["label"]))
