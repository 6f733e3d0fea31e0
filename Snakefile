# attncert: reproduce Paper A (certifying one attention head) and Paper B (Min-IP kernel attention).
#   snakemake --cores all                      # default: embedded all-MiniLM-L6-v2, offline
#   snakemake --cores all --configfile workflow/config/paper.yaml   # GPT-2 small, the papers' grid
#   snakemake figures/<name>.pdf               # one figure and only what it needs
from snakemake.utils import min_version

min_version("8.0")


configfile: "workflow/config/default.yaml"


include: "workflow/rules/common.smk"


# every output path of a transformer stage carries the configured model's name, and no other
wildcard_constraints:
    model=MODEL_PATTERN,


include: "workflow/rules/extract.smk"
include: "workflow/rules/certify.smk"
include: "workflow/rules/baselines.smk"
include: "workflow/rules/block.smk"
include: "workflow/rules/minip.smk"
include: "workflow/rules/long_context.smk"
include: "workflow/rules/audit.smk"


# every stage's measured values, joined with data/paper_claims.yaml by the final report
MEASURED_FILES = [
    f"figures/tables/{MODEL}/certify_measured.json",
    f"figures/tables/{MODEL}/baselines_measured.json",
] + ([f"figures/tables/{MODEL}/block_measured.json"] if BLOCK_TRANSITIONS else []) + [  # a one-layer model: no block
    f"figures/tables/{MODEL}/method_checks_measured.json",
] + MINIP_MEASURED + ([f"figures/tables/{MODEL}/long_context_measured.json"] if LC else [])


include: "workflow/rules/report.smk"


rule all:
    input:
        EXTRACT_OUTPUTS,
        CERTIFY_OUTPUTS,
        BASELINES_OUTPUTS,
        BLOCK_OUTPUTS,
        MINIP_OUTPUTS,
        LONG_CONTEXT_OUTPUTS,
        AUDIT_OUTPUTS,
        REPORT_OUTPUTS,
    default_target: True
