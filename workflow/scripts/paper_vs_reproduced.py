"""Snakemake entry point: figures/tables/{model}/paper_vs_reproduced.{md,csv,json} from every stage's measurements.

The verdict rule is attncert.paper_comparison.verdict; the JSON ({"model", "measured", "provenance"}) is the snapshot
that `python -m attncert.paper_comparison.readme_results` adopts to regenerate the README's verdict tally and
docs/results.md.
"""
from attncert.paper_comparison.claims import load_claims
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.integrity.intermediate_check import expect_model_of
from attncert.provenance.job_log import start_job_log
from attncert.model.model_source import model_label
from attncert.paper_comparison.paper_comparison import comparison_table, load_measured, to_markdown
from attncert.provenance.provenance import provenance, write_json, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
model = model_label(sm.params.model)
claims = load_claims(sm.input.claims)
measured = load_measured([verify_intermediate(p) for p in sm.input.measured])
table = comparison_table(claims, measured, model)
table.to_csv(sm.output.csv, index=False)
with open(sm.output.md, "w") as fh:
    fh.write(to_markdown(table, claims, measured, model))
record = provenance(sm.params, stage="paper_vs_reproduced", inputs=list(sm.input.measured))
write_json(sm.output.snapshot, {"model": model, "measured": measured, "provenance": record})
write_sidecar(sm.output.csv, record)
