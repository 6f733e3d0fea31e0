"""Snakemake entry point: the block-residual table (summary + paper comparison) or one figure.

Derived per row (unit = transition x head, at one radius r):
    crown_looseness      = CROWN upper bound / ascent maximum of f
    predicted_looseness  = per-op sum / joint second-order maximum       (radius independent)
    crown_over_perop     = CROWN upper bound / per-op sum
    second_order_dev     = ascent maximum / second-order maximum - 1
    softmax_ratio        = per-op sum (softmax as one op) / per-op sum
Rank correlations use the reference radius r_ref = the largest grid radius <= block.reference_radius;
the "second-order regime" subset is the units with |second_order_dev(r_ref)| <= block.second_order_tolerance.
"""
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from attncert.pipeline.paper_comparison import write_measured  # noqa: E402
from attncert.pipeline.provenance import atomic_path, provenance, write_sidecar  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake


def derive(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["crown_looseness"] = df["crown_upper"] / df["ascent_max"]
    df["predicted_looseness"] = df["per_op_sum"] / df["second_order_max"]
    df["predicted_looseness_softmax_one_op"] = df["per_op_sum_softmax_one_op"] / df["second_order_max"]
    df["crown_over_perop"] = df["crown_upper"] / df["per_op_sum"]
    df["second_order_dev"] = df["ascent_max"] / df["second_order_max"] - 1.0
    df["softmax_ratio"] = df["per_op_sum_softmax_one_op"] / df["per_op_sum"]
    df["upper_over_best"] = df["second_order_upper"] / df["second_order_max"]
    df["crown_over_leading_order"] = df["crown_upper"] / df["crown_leading_order"]
    return df


def reference_radius(df: pd.DataFrame, block: dict) -> float:
    radii = sorted(df["radius"].unique())
    below = [r for r in radii if r <= block["reference_radius"] * (1 + 1e-12)]
    return below[-1] if below else radii[0]


def grid_label(df: pd.DataFrame) -> str:
    model, family = df["model"].iloc[0], df["family"].iloc[0]
    n_t, n_h = df["transition"].nunique(), df["head"].nunique()
    units = df.groupby(["transition", "head"]).ngroups
    radii = ", ".join(f"{r:g}" for r in sorted(df["radius"].unique()))
    return (f"{model} ({family}): {n_t} transitions × {n_h} heads = {units} units; prompt {df['prompt'].iloc[0]}, "
            f"query position {df['position'].iloc[0]}; query token's residual stream perturbed, l∞ box, r ∈ {{{radii}}}")


def rho(x, y) -> tuple[float, float, int]:
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan"), float("nan"), int(ok.sum())
    res = spearmanr(np.asarray(x)[ok], np.asarray(y)[ok])
    return float(res.statistic), float(res.pvalue), int(ok.sum())


def spread(s: pd.Series) -> str:
    s = s[np.isfinite(s)]
    return f"{s.median():.3g} ({s.min():.3g}–{s.max():.3g})" if len(s) else "n/a"


def at_reference(df: pd.DataFrame, block: dict):
    r_ref = reference_radius(df, block)
    ref = df[np.isclose(df["radius"], r_ref)].copy()
    ref["subset"] = ref["second_order_dev"].abs() <= block["second_order_tolerance"]
    return r_ref, ref


def write_table(df: pd.DataFrame, csv_path: str, md_path: str, title: str, notes: list[str]) -> None:
    with atomic_path(csv_path) as tmp:
        df.to_csv(tmp, index=False)
    md = f"# {title}\n\n" + df.to_markdown(index=False, floatfmt=".4g") + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    with atomic_path(md_path) as tmp:
        tmp.write_text(md)


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for r, g in df.groupby("radius"):
        rr, pr, n = rho(g["predicted_looseness"], g["crown_looseness"])
        rs, ps, _ = rho(g["predicted_looseness_softmax_one_op"], g["crown_looseness"])
        rows.append({
            "radius": r, "units": len(g),
            "second_order_dev_median": g["second_order_dev"].median(),
            "second_order_abs_dev_min": g["second_order_dev"].abs().min(),
            "second_order_abs_dev_max": g["second_order_dev"].abs().max(),
            "crown_over_perop_median": g["crown_over_perop"].median(),
            "crown_over_perop_min": g["crown_over_perop"].min(), "crown_over_perop_max": g["crown_over_perop"].max(),
            "crown_over_leading_order_median": g["crown_over_leading_order"].median(),
            "crown_over_leading_order_max": g["crown_over_leading_order"].max(),
            "crown_looseness_median": g["crown_looseness"].median(),
            "spearman_rho": rr, "spearman_p": pr,
            "spearman_rho_softmax_one_op": rs, "spearman_p_softmax_one_op": ps,
            "crown_ge_ascent": int((g["crown_upper"] >= g["ascent_max"]).sum()),
            "status_not_ok": int((g["status"] != "ok").sum()),
        })
    return pd.DataFrame(rows)


def claim(claims: list, cid: str) -> dict:
    return next((c for c in claims if c["id"] == cid), {})


def fmt_claim(c: dict) -> str:
    v = c.get("value")
    if isinstance(v, dict):
        lo, hi = v.get("range", [None, None])
        return f"{v.get('median')} ({lo}–{hi})"
    if isinstance(v, list):
        return f"{v[0]}–{v[1]}"
    return "n/a" if v is None else str(v)


def paper_table(df: pd.DataFrame, block: dict, claims: list) -> pd.DataFrame:
    r_ref, ref = at_reference(df, block)
    small = df[df["radius"] <= r_ref * (1 + 1e-12)]
    sub = ref[ref["subset"]]
    ra, pa, na = rho(ref["predicted_looseness"], ref["crown_looseness"])
    rsub, psub, nsub = rho(sub["predicted_looseness"], sub["crown_looseness"])
    rsa, psa, _ = rho(ref["predicted_looseness_softmax_one_op"], ref["crown_looseness"])
    rss, pss, _ = rho(sub["predicted_looseness_softmax_one_op"], sub["crown_looseness"])
    units = ref.groupby(["transition", "head"]).ngroups
    dev = small["second_order_dev"].abs()
    sound = int((df["crown_upper"] >= df["ascent_max"]).sum())
    sm1 = claim(claims, "block_softmax_one_op")
    rows = [
        ("units (transitions × heads)", fmt_claim(claim(claims, "block_units")),
         f"{units} ({ref['transition'].nunique()} × {ref['head'].nunique()})", "one unit = (transition l -> l+1, head of block l+1)"),
        (f"|ascent max / second-order term - 1|, r ≤ {r_ref:g}", fmt_claim(claim(claims, "block_second_order_match")),
         f"{dev.min():.2g}–{dev.max():.2g} (median {dev.median():.2g})", "second-order term = best-found box maximum of 1/2 δᵀHδ"),
        (f"CROWN bound / per-op sum, r ≤ {r_ref:g}", fmt_claim(claim(claims, "block_crown_over_perop")),
         spread(small["crown_over_perop"]), "per radius: figures/tables/<model>/block_summary.md"),
        ("Spearman ρ, CROWN vs predicted looseness, subset", fmt_claim(claim(claims, "block_spearman_subset")) + " (96 units)",
         f"{rsub:.3f} (p = {psub:.2g}, {nsub} units)",
         f"subset: |ascent/second-order - 1| ≤ {block['second_order_tolerance']:g} at r = {r_ref:g}"),
        ("Spearman ρ, all units", fmt_claim(claim(claims, "block_spearman_all")) + " (132 units)",
         f"{ra:.3f} (p = {pa:.2g}, {na} units)", f"at r = {r_ref:g}"),
        ("predicted looseness (per-op sum / joint maximum)", fmt_claim(claim(claims, "block_predicted_looseness")),
         spread(ref["predicted_looseness"]), "radius independent (both scale as r²)"),
        ("effective rank of the curvature", fmt_claim(claim(claims, "block_effective_rank")),
         spread(ref["effective_rank"]), f"(Σ|μ|)²/Σμ² over the eigenvalues of H, d = {int(df['d'].iloc[0])} coordinates"),
        ("per-op sum ratio, softmax as one op", fmt_claim(sm1),
         f"{ref['softmax_ratio'].min():.3g}–{ref['softmax_ratio'].max():.3g} (median {ref['softmax_ratio'].median():.3g})",
         "exps + reciprocals of a head merged into one softmax operation"),
        ("Spearman ρ with softmax as one op (subset / all)", sm1.get("sentence", "n/a"),
         f"{rss:.3f} (p = {pss:.2g}) / {rsa:.3f} (p = {psa:.2g})", f"at r = {r_ref:g}"),
        ("joint second-order maximum: SDP-dual upper bound / best found", "n/a (paper: exact second-order term)",
         spread(ref["upper_over_best"]), "brackets the NP-hard box maximum of 1/2 δᵀHδ"),
        (f"CROWN bound / CROWN leading order (r = {sorted(df['radius'].unique())[0]:g})", "n/a",
         spread(df.loc[np.isclose(df["radius"], sorted(df["radius"].unique())[0]), "crown_over_leading_order"]),
         "leading order: Σ unary M_n + Σ products |λ| ‖j_x‖₁‖j_y‖₁ (docs/block_residual.md §5)"),
        ("CROWN bound ≥ ascent maximum", "every unit (sound)", f"{sound} of {len(df)} (unit, radius) rows",
         "CROWN via bound_propagation 0.4.7, float64, rounding margin added"),
    ]
    return pd.DataFrame(rows, columns=["quantity", "paper (GPT-2 small)", f"ours ({df['model'].iloc[0]})", "note"])


def plain_log_axis(ax, which: str = "x") -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def save_figure(fig, pdf: str, png: str) -> None:
    with atomic_path(pdf) as tmp:
        fig.savefig(tmp, bbox_inches="tight")
    with atomic_path(png) as tmp:
        fig.savefig(tmp, bbox_inches="tight", dpi=150)
    plt.close(fig)


def figure_crown_vs_predicted(df: pd.DataFrame, block: dict, pdf: str, png: str) -> None:
    r_ref, ref = at_reference(df, block)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    cmap = plt.get_cmap("viridis")
    transitions = sorted(ref["transition"].unique())
    for ax, col, name in ((axes[0], "predicted_looseness", "per-op sum"),
                          (axes[1], "predicted_looseness_softmax_one_op", "per-op sum, softmax as one op")):
        for k, t in enumerate(transitions):
            g = ref[ref["transition"] == t]
            color = cmap(k / max(len(transitions) - 1, 1))
            ax.scatter(g.loc[g.subset, col], g.loc[g.subset, "crown_looseness"], color=color, s=22, label=f"{t}→{t + 1}")
            ax.scatter(g.loc[~g.subset, col], g.loc[~g.subset, "crown_looseness"], facecolors="none", edgecolors=color, s=22)
        lo = min(ref[col].min(), ref["crown_looseness"].min()) * 0.8
        hi = max(ref[col].max(), ref["crown_looseness"].max()) * 1.25
        ax.plot([lo, hi], [lo, hi], "k:", lw=0.8, label="y = x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_log_axis(ax, "x")
        plain_log_axis(ax, "y")
        ra, pa, na = rho(ref[col], ref["crown_looseness"])
        sub = ref[ref.subset]
        rs, ps, ns = rho(sub[col], sub["crown_looseness"])
        ax.text(0.03, 0.97, f"Spearman all: ρ = {ra:.3f} (p = {pa:.1e}, n = {na})\n"
                            f"subset (filled): ρ = {rs:.3f} (p = {ps:.1e}, n = {ns})",
                transform=ax.transAxes, va="top", fontsize=8)
        ax.set_xlabel(f"predicted looseness = {name} / joint max")
        ax.set_ylabel(f"CROWN looseness = CROWN / ascent max (r = {r_ref:g})")
    axes[0].legend(fontsize=7, title="transition", title_fontsize=7, loc="lower right")
    fig.suptitle(f"Block residual: CROWN looseness vs predicted looseness\n{grid_label(df)}", fontsize=8)
    save_figure(fig, pdf, png)


def _paper_band(ax, c: dict, axis: str = "x") -> None:
    v = c.get("value")
    rng = v.get("range") if isinstance(v, dict) else (v if isinstance(v, list) else None)
    if not rng:
        return
    span = ax.axvspan if axis == "x" else ax.axhspan
    span(rng[0], rng[1], color="tab:orange", alpha=0.15, label="paper range (GPT-2 small)")
    if isinstance(v, dict) and v.get("median") is not None:
        (ax.axvline if axis == "x" else ax.axhline)(v["median"], color="tab:orange", ls="--", lw=1, label="paper median")


def figure_distributions(df: pd.DataFrame, block: dict, claims: list, pdf: str, png: str) -> None:
    _, ref = at_reference(df, block)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    pl = ref["predicted_looseness"]
    axes[0].hist(pl, bins=np.geomspace(pl.min() * 0.9, pl.max() * 1.1, 20), color="tab:blue", alpha=0.8, label="ours")
    axes[0].set_xscale("log")
    plain_log_axis(axes[0])
    _paper_band(axes[0], claim(claims, "block_predicted_looseness"))
    axes[0].set_xlabel("predicted looseness (per-op sum / joint max)")
    er = ref["effective_rank"]
    axes[1].hist(er, bins=np.geomspace(min(er.min(), 2) * 0.9, er.max() * 1.1, 20), color="tab:green", alpha=0.8, label="ours")
    axes[1].set_xscale("log")
    plain_log_axis(axes[1])
    _paper_band(axes[1], claim(claims, "block_effective_rank"))
    axes[1].set_xlabel("effective rank (Σ|μ|)²/Σμ² of the Hessian")
    axes[2].hist(ref["softmax_ratio"], bins=20, color="tab:purple", alpha=0.8, label="ours")
    _paper_band(axes[2], claim(claims, "block_softmax_one_op"))
    axes[2].set_xlabel("per-op sum, softmax as one op / per-op sum")
    for ax in axes:
        ax.set_ylabel("units")
        ax.legend(fontsize=7)
    fig.suptitle(f"Block residual: predicted looseness, effective rank, softmax as one op (r = {at_reference(df, block)[0]:g})\n{grid_label(df)}", fontsize=8)
    save_figure(fig, pdf, png)


def figure_crown_over_perop(df: pd.DataFrame, claims: list, pdf: str, png: str) -> None:
    radii = sorted(df["radius"].unique())
    pos = np.log10(radii)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))

    def boxes(ax, col, log=False):
        data = [df.loc[np.isclose(df["radius"], r), col].dropna() for r in radii]
        ax.boxplot(data, positions=pos, widths=0.15)
        ax.set_xticks(pos, [f"{r:g}" for r in radii])
        ax.set_xlabel("radius r (l∞)")
        if log:
            ax.set_yscale("log")

    boxes(axes[0], "crown_over_perop")
    _paper_band(axes[0], claim(claims, "block_crown_over_perop"), axis="y")
    axes[0].set_ylabel("CROWN bound / per-op sum")
    axes[0].legend(fontsize=7)
    boxes(axes[1], "crown_over_leading_order")
    axes[1].axhline(1.0, color="k", ls=":", lw=0.8)
    axes[1].set_ylabel("CROWN bound / CROWN leading order (r² term)")
    df = df.assign(abs_dev=df["second_order_dev"].abs().clip(lower=1e-8))
    data = [df.loc[np.isclose(df["radius"], r), "abs_dev"] for r in radii]
    axes[2].boxplot(data, positions=pos, widths=0.15)
    axes[2].set_xticks(pos, [f"{r:g}" for r in radii])
    axes[2].set_xlabel("radius r (l∞)")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("|ascent max / second-order term − 1|")
    fig.suptitle(f"Block residual: CROWN vs the per-operation sum and its own leading order; the second-order regime\n{grid_label(df)}", fontsize=8)
    save_figure(fig, pdf, png)


def measured_values(df: pd.DataFrame, block: dict) -> dict:
    """Our values for the block_* claim ids of data/paper_claims.yaml."""
    r_ref, ref = at_reference(df, block)
    small = df[df["radius"] <= r_ref * (1 + 1e-12)]
    sub = ref[ref["subset"]]

    def med_range(s):
        s = s[np.isfinite(s)]
        return {"median": float(s.median()), "range": [float(s.min()), float(s.max())]}

    dev = small["second_order_dev"].abs()
    return {
        "block_units": int(ref.groupby(["transition", "head"]).ngroups),
        "block_second_order_match": [float(dev.min()), float(dev.max())],
        "block_crown_over_perop": med_range(small["crown_over_perop"]),
        "block_spearman_subset": rho(sub["predicted_looseness"], sub["crown_looseness"])[0],
        "block_spearman_all": rho(ref["predicted_looseness"], ref["crown_looseness"])[0],
        "block_predicted_looseness": med_range(ref["predicted_looseness"]),
        "block_effective_rank": med_range(ref["effective_rank"]),
        "block_softmax_one_op": [float(ref["softmax_ratio"].min()), float(ref["softmax_ratio"].max())],
    }


df = derive(pd.read_csv(sm.input.units))
block = sm.params.block
claims = yaml.safe_load(open(sm.input.claims))["paper_a"]["claims"] if "claims" in sm.input.keys() else []
what = sm.params.what
label = grid_label(df)
if what == "table":
    r_ref, _ = at_reference(df, block)
    write_table(summary_table(df), sm.output.summary, sm.output.summary_md, f"Block residual per radius — {label}",
                [f"Spearman ρ: CROWN looseness vs predicted looseness over the units at that radius (scipy.stats.spearmanr).",
                 "second_order_dev = ascent max / best-found second-order maximum − 1; crown_ge_ascent counts sound rows."])
    write_table(paper_table(df, block, claims), sm.output.paper, sm.output.paper_md,
                f"Paper A block residual experiment (GPT-2 small) vs ours — {label}",
                ["Paper values from data/paper_claims.yaml (paper_a, block_*). Ours: this run; embedded-model "
                 "results are not GPT-2 results.", f"Rank correlations at r = {r_ref:g}."])
    write_measured(sm.output.measured, measured_values(df, block), label)
elif what == "crown_vs_predicted":
    figure_crown_vs_predicted(df, block, sm.output[0], sm.output.png)
elif what == "distributions":
    figure_distributions(df, block, claims, sm.output[0], sm.output.png)
elif what == "crown_over_perop":
    figure_crown_over_perop(df, claims, sm.output[0], sm.output.png)
else:
    raise ValueError(f"unknown block report {what!r}")
for out in sm.output:
    write_sidecar(out, provenance(sm.config, stage=f"block_report:{what}", inputs=[str(sm.input.units)],
                                  grid=label, seeds={"block_seed": block["seed"]}))
with open(sm.log[0], "w") as fh:
    fh.write(json.dumps({"what": what, "rows": int(len(df)), "grid": label}) + "\n")
