"""Snakemake entry point: the baseline comparison table and figure."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from attncert.baselines import comparison as bc  # noqa: E402
from attncert.certify.figures import grid_label, write_table  # noqa: E402
from attncert.pipeline.paper_comparison import write_measured  # noqa: E402
from attncert.pipeline.job_log import start_job_log  # noqa: E402
from attncert.pipeline.provenance import provenance, write_sidecar  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
model = sm.config["model"]["name"]
base = pd.concat([pd.read_csv(f) for f in sm.input.baselines], ignore_index=True)
cert = pd.concat([pd.read_csv(f) for f in sm.input.cert], ignore_index=True)
m = bc.merge(base, cert)
label = grid_label(base.drop(columns=["method"]).drop_duplicates(), model)
labels = "; ".join(f"{k}: {v}" for k, v in base.groupby("method")["label"].first().items())

if sm.params.what == "table":
    table = bc.comparison_table(m, model)
    slopes = bc.slope_table(m, model)
    head = bc.headline(m, model)
    first_order = bc.crown_vs_first_order(m)
    lost = bc.lost_units(base)
    unsound = base[base["status"].str.startswith("UNSOUND")]
    n_units = len(base.drop_duplicates(bc.KEYS))
    title = f"Baselines vs the second-order certificate — {label}"
    method_lines = "\n".join(f"- `{k}`: {v}" for k, v in base.groupby("method")["label"].first().items())
    md = [f"# {title}\n", f"Methods (docs/baselines.md gives each one's auto_LiRPA counterpart):\n\n{method_lines}\n",
          f"The paper's CROWN is compared with `{bc.PAPER_CROWN_METHOD}`, its α-CROWN with `{bc.PAPER_ALPHA_METHOD}`.\n",
          "Ratio = baseline gap / certificate gap on the same unit (paper: GPT-2 small, query position 4).\n",
          table.to_markdown(index=False, floatfmt=".3g"), "\n\n## Per-unit log-log slopes (medians)\n",
          slopes.to_markdown(index=False, floatfmt=".3g"), "\n\n## Overall\n", head.to_markdown(index=False, floatfmt=".3g"),
          "\n\n## CROWN vs the first-order certificate at the smallest radius\n",
          first_order.to_markdown(index=False, floatfmt=".3g"),
          f"\n\nSoundness: {len(unsound)} baseline bounds below an attained value (of {len(base)}).\n",
          f"\nUnits lost: {len(lost)} (unit, method) rows without a bound, of {len(base)} "
          f"({n_units} units × {base['method'].nunique()} methods).\n"]
    if len(lost):
        md.append(lost.to_markdown(index=False))
    write_measured(sm.output.measured, bc.paper_measurements(table, slopes, head, first_order, lost), label)
    table.to_csv(sm.output.csv, index=False)
    slopes.to_csv(sm.output.slopes, index=False)
    head.to_csv(sm.output.headline, index=False)
    with open(sm.output.md, "w") as fh:
        fh.write("\n".join(md))
else:
    ok = m[(m["status"] == "ok") & (m["gap"] > 0)].copy()
    cert_rows = m.drop_duplicates(bc.KEYS).assign(method="second_order", gap=lambda d: d["gap_second_order"])
    allm = pd.concat([ok, cert_rows[cert_rows["gap"] > 0]], ignore_index=True)
    sns.set_theme(style="whitegrid")
    modes = sorted(allm["mode"].unique())
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4.5), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        sub = allm[allm["mode"] == mode]
        for method, g in sub.groupby("method"):
            q = g.groupby("radius")["rel_gap" if method != "second_order" else "gap"].median()
            if method == "second_order":
                q = (g["gap"] / g["movement"]).groupby(g["radius"]).median()
            ax.plot(q.index, q.values, "o-", label=method)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius r")
        ax.set_title(f"{mode} query", fontsize=10)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("median relative gap (bound − reference) / movement")
    fig.suptitle(f"IBP / CROWN / α-CROWN variants vs the second-order certificate — {label}", fontsize=9)
    fig.savefig(sm.output.pdf, bbox_inches="tight")
    fig.savefig(sm.output.png, bbox_inches="tight", dpi=150)
for out in sm.output:
    write_sidecar(out, provenance(sm.config, stage=f"baselines_report:{sm.params.what}", method_labels=labels))
