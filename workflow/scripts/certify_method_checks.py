"""Snakemake entry point: Paper A's claims about the method itself, on random small heads (no model)."""
from attncert.certify.method_checks import substitution_vs_enumeration, two_key_gap_slopes
from attncert.provenance.job_log import start_job_log
from attncert.paper_comparison.paper_comparison import write_measured
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
c = sm.params.checks
values = {**two_key_gap_slopes(c["two_key_heads"], c["two_key_radii"], c["seed"]),
          **substitution_vs_enumeration(c["substitution_instances"], c["seed"])}
grid = (f"random small heads, no model: {c['two_key_heads']} two-key heads x 2 norms at r = {c['two_key_radii']}; "
        f"{c['substitution_instances']} substitution instances")
write_measured(sm.output.measured, values, grid)
write_sidecar(sm.output.measured, provenance(sm.params, stage="certify_method_checks", model_id="none"))
