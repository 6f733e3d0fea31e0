"""The block-residual figures: CROWN vs predicted looseness, distributions, CROWN over the per-op sum.

Each figure names the model and grid (`report.grid_label`) and, where the paper gives a number, shows
the paper's band beside ours.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from attncert.block.report import at_reference, claim, grid_label, rho  # noqa: E402
from attncert.provenance.provenance import atomic_path  # noqa: E402


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
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)  # below the axes
    fig.suptitle(f"Block residual: predicted looseness, effective rank, softmax as one op (r = {at_reference(df, block)[0]:g})\n{grid_label(df)}", fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 0.92))
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
    axes[0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)  # below the axes
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


def _quantiles(df: pd.DataFrame, col: str, radii) -> np.ndarray:
    """(3, R): 25%, 50%, 75% over units at each radius, +inf kept (as the largest), NaN where all are NaN."""
    out = np.full((3, len(radii)), np.nan)
    for k, r in enumerate(radii):
        v = df.loc[np.isclose(df["radius"], r), col].to_numpy(dtype=float)
        v = v[~np.isnan(v)]
        if len(v):
            with np.errstate(invalid="ignore"):     # +inf quartiles stay +inf (not drawn)
                out[:, k] = np.quantile(v, [0.25, 0.5, 0.75])
    return out


def figure_certificate_vs_radius(df: pd.DataFrame, claims: list, pdf: str, png: str) -> None:
    """Bound on max f / ascent maximum of f against the radius: the second-order certificate, the reported bound
    (the smaller of it and CROWN's), CROWN, alpha-CROWN where run, the per-operation sum; the paper's implied CROWN
    looseness (its CROWN / per-op median times its per-op / joint maximum median) where the claims give them. Right:
    the gap on g over the linear movement, certificate vs CROWN."""
    radii = sorted(df["radius"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.8))
    ax = axes[0]
    series = [("second_order_certificate_looseness", "second-order certificate (sound)", "tab:red", "o", "-"),
              ("certificate_looseness", "reported: min(certificate, CROWN) (sound)", "k", "s", ":"),
              ("crown_looseness", "CROWN", "tab:blue", "^", "-"),
              ("alpha_crown_looseness", "α-CROWN", "tab:cyan", "v", "--"),
              ("per_op_looseness", "per-operation sum (not a bound; CROWN's r² floor)", "tab:gray", "x", "--")]
    finite_top = 1.0
    for col, label, color, marker, ls in series:
        if col not in df or not np.isfinite(df[col]).any():
            continue
        q = _quantiles(df, col, radii)
        ok = np.isfinite(q[1])
        if col == "alpha_crown_looseness":       # drawn over CROWN: say how close, so that a hidden line is read
            dev = np.nanmax(np.abs(q[1] / _quantiles(df, "crown_looseness", radii)[1] - 1))
            label = f"{label} (medians within {100 * dev:.2g}% of CROWN's)"
        ax.plot(np.array(radii)[ok], q[1, ok], color=color, marker=marker, ls=ls, lw=1.4, ms=5,
                mfc="none" if col == "alpha_crown_looseness" else color, label=f"{label}: median")
        band = np.isfinite(q[0]) & np.isfinite(q[2])
        if col != "certificate_looseness" and band.any():
            ax.fill_between(np.array(radii)[band], q[0, band], q[2, band], color=color, alpha=0.12, lw=0)
        finite_top = max(finite_top, np.nanmax(np.where(np.isfinite(q), q, np.nan)))
    for k, r in enumerate(radii):
        g = df[np.isclose(df["radius"], r)]
        n_inf = int((~np.isfinite(g["second_order_certificate_f"])).sum())
        if n_inf:
            ax.annotate(f"second-order certificate:\n{n_inf} of {len(g)} units +inf at r = {r:g}", (r, finite_top),
                        textcoords="offset points", xytext=(-8, 4), ha="right", va="bottom", fontsize=7,
                        color="tab:red")
    ax.axhline(1.0, color="k", lw=0.8, label="ascent maximum (a lower bound on max f)")
    c_crown, c_pred = claim(claims, "block_crown_over_perop"), claim(claims, "block_predicted_looseness")
    med = lambda c: c.get("value", {}).get("median") if isinstance(c.get("value"), dict) else None  # noqa: E731
    if med(c_crown) is not None and med(c_pred) is not None:
        small = [r for r in radii if r <= 1e-3 * (1 + 1e-12)] or radii
        ax.hlines(med(c_crown) * med(c_pred), small[0], small[-1], color="tab:blue", ls="--", lw=1.2,
                  label=f"paper, GPT-2 small, r ≤ 1e-3: CROWN implied by its medians, (CROWN / per-op sum "
                        f"{med(c_crown):g}) × (per-op sum / joint max {med(c_pred):g}) ≈ {med(c_crown) * med(c_pred):.0f}")
        ax.hlines(med(c_pred), small[0], small[-1], color="tab:gray", ls="-.", lw=1.2,
                  label=f"paper, GPT-2 small: per-op sum / joint maximum ≈ {med(c_pred):g} (median)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(radii, [f"{r:g}" for r in radii])
    plain_log_axis(ax, "x")
    ax.set_xlabel("radius r (l∞ box on the query token's residual stream)")
    ax.set_ylabel("bound on max f / ascent maximum of f")
    ax.set_ylim(0.7, finite_top * 3)
    ax.set_title("bound / ascent maximum (lines: medians; shaded: quartiles over units)", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)
    ax = axes[1]
    for col, label, color, marker in (("certificate_gap_g", "second-order certificate", "tab:red", "o"),
                                      ("crown_gap_g", "CROWN", "tab:blue", "^")):
        q = _quantiles(df, col, radii)
        ok = np.isfinite(q[1]) & (q[1] > 0)
        ax.plot(np.array(radii)[ok], q[1, ok], color=color, marker=marker, lw=1.4, ms=5, label=f"{label}: median")
        band = np.isfinite(q[0]) & np.isfinite(q[2]) & (q[0] > 0)
        ax.fill_between(np.array(radii)[band], q[0, band], q[2, band], color=color, alpha=0.12, lw=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(radii, [f"{r:g}" for r in radii])
    plain_log_axis(ax, "x")
    ax.set_xlabel("radius r (l∞)")
    ax.set_ylabel("(bound on max g − g(0) − r‖∇g‖₁) / (r‖∇g‖₁)")
    ax.set_title("gap on g over the linear movement", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)
    fig.suptitle("Block certificate (beyond the paper) vs CROWN"
                 + (" and α-CROWN" if np.isfinite(df["alpha_crown_upper"]).any() else " (α-CROWN not run)")
                 + f"\n{grid_label(df)}", fontsize=8)
    save_figure(fig, pdf, png)


#: figure name (= file name under figures/block/{model}/) -> drawing function (names: `figure_names.FIGURE_NAMES`)
FIGURES = {
    "crown_vs_predicted_looseness": lambda df, block, claims, pdf, png: figure_crown_vs_predicted(df, block, pdf, png),
    "looseness_and_rank": figure_distributions,
    "crown_over_per_op_sum": lambda df, block, claims, pdf, png: figure_crown_over_perop(df, claims, pdf, png),
    "certificate_vs_radius": lambda df, block, claims, pdf, png: figure_certificate_vs_radius(df, claims, pdf, png),
}


def draw(name: str, df: pd.DataFrame, block: dict, claims: list, pdf: str, png: str) -> None:
    """One block figure by name (the keys of FIGURES); `df` already `report.derive`d."""
    if name not in FIGURES:
        raise ValueError(f"unknown block figure {name!r}; known: {sorted(FIGURES)}")
    FIGURES[name](df, block, claims, pdf, png)
