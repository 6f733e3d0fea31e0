"""Snakemake entry point: one figure or the summary table of the certification stage."""
import sys

from attncert.certify import figures as cf
from attncert.pipeline.job_log import start_job_log  # noqa: E402
from attncert.pipeline.paper_comparison import write_measured  # noqa: E402
from attncert.pipeline.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
model = sm.config["model"]["name"]
df = cf.load_tables(sm.input.tables)
what = sm.params.what
if what == "relative_gap":
    cf.figure_relative_gap(df, model, sm.output[0])
elif what == "gap_over_secant":
    cf.figure_gap_over_secant(df, model, sm.output[0])
elif what == "within":
    cf.figure_certified_within(df, model, sm.output[0])
elif what == "table":
    label = cf.grid_label(df, model)
    table, slopes = cf.summary_table(df, model)
    cf.write_table(table, sm.output.table, f"Certification per radius — {label}")
    cf.write_table(slopes, sm.output.slopes, f"Per-unit log-log slopes (medians) — {label}")
    cf.write_table(cf.paper_comparison(table, slopes, df, model), sm.output.paper,
                   f"Paper A (GPT-2 small) vs reproduced ({label})")
    write_measured(sm.output.measured, cf.paper_measurements(df, table, slopes), label)
    viol = cf.violations_table(df)
    cf.write_table(viol, sm.output.violations, f"Soundness violations — {label} ({len(viol)} rows)")
    if len(viol):
        print(f"attncert: {len(viol)} SOUNDNESS VIOLATIONS, see {sm.output.violations}", file=sys.stderr)
else:
    raise ValueError(f"unknown figure {what!r}")
for out in sm.output:
    write_sidecar(out, provenance(sm.config, stage=f"certify_figures:{what}", inputs=list(sm.input.tables)))
