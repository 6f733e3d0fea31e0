"""The block-residual figures: CROWN vs predicted looseness, distributions, CROWN over the per-op sum.

Each figure names the model and grid (`report.grid_label`) and, where the paper gives a number, shows
the paper's value or range beside ours, over the radii the paper's number covers only. Names, colours,
sizes and the paper's marks: `figure_style.style`.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from attncert.block.report import at_reference, claim, grid_label, rho  # noqa: E402
from attncert.figure_style import style  # noqa: E402
from attncert.provenance.provenance import atomic_path  # noqa: E402

#: the paper's block numbers are medians / ranges over r ≤ this radius (data/paper_claims.yaml: "r ≤ 0.001")
PAPER_MAX_RADIUS = 1e-3


def plain_log_axis(ax, which: str = "x") -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    axis = ax.xaxis if which == "x" else ax.yaxis
    if (ax.get_xscale() if which == "x" else ax.get_yscale()) == "log":  # labels at 1, 2, 5 × 10^k
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
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
    style.use()
    fig, axes = plt.subplots(1, 2, figsize=(10.4, 5.0), sharey=True)
    cmap = plt.get_cmap("viridis")
    transitions = sorted(ref["transition"].unique())
    for ax, col, name in ((axes[0], "predicted_looseness", "per-op sum"),
                          (axes[1], "predicted_looseness_softmax_one_op", "per-op sum, softmax as one op")):
        for k, t in enumerate(transitions):
            g = ref[ref["transition"] == t]
            color = cmap(k / max(len(transitions) - 1, 1))
            ax.scatter(g.loc[g.subset, col], g.loc[g.subset, "crown_looseness"], color=color, s=22,
                       label=f"{t}→{t + 1}")
            ax.scatter(g.loc[~g.subset, col], g.loc[~g.subset, "crown_looseness"], facecolors="none",
                       edgecolors=color, s=22)
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
                transform=ax.transAxes, va="top", fontsize=style.FONT["note"])
        ax.set_xlabel(f"{name} / joint max")
        ax.set_title(f"predicted looseness: {name}")
    axes[0].set_ylabel(f"CROWN looseness = CROWN / ascent max (r = {r_ref:g})")
    axes[0].legend(title="transition (open: outside the subset)", loc="lower right", ncol=2,
                   fontsize=style.FONT["legend"], title_fontsize=style.FONT["legend"], frameon=True)
    fig.suptitle(f"Block residual: CROWN looseness vs predicted looseness\n{style.wrap(grid_label(df))}")
    save_figure(fig, pdf, png)


def _range_of(c: dict):
    """(low, high, median or None) of a claim's value {median, range} or [low, high]; None without a range."""
    v = c.get("value")
    rng = v.get("range") if isinstance(v, dict) else (v if isinstance(v, list) else None)
    if not rng:
        return None
    return float(rng[0]), float(rng[1]), (v.get("median") if isinstance(v, dict) else None)


def _paper_range_x(ax, c: dict) -> None:
    """The paper's range of a histogrammed quantity as a bracket along the top of the axes (no shading: a
    band behind the bars would make one histogram look like two)."""
    if (r := _range_of(c)) is not None:
        style.paper_range(ax, None, None, r[0], r[1], median=r[2], axis="x",
                          label=f"paper (GPT-2 small): range {r[0]:g}–{r[1]:g}")


def _hist(ax, values, color, log=False) -> None:
    bins = np.geomspace(values.min() * 0.9, values.max() * 1.1, 20) if log else 20
    ax.hist(values, bins=bins, color=color, edgecolor="white", lw=0.5, label=f"ours: {len(values)} units",
            zorder=style.Z_OURS)
    ax.axvline(values.median(), color="black", lw=1.2, zorder=style.Z_OURS + 0.1,
               label=f"ours: median {values.median():.3g}")
    if log:
        ax.set_xscale("log")
        plain_log_axis(ax)


#: the three definitions of the Hessian's effective rank (units.csv column, label)
RANKS = (("effective_rank", "participation ratio (Σ|μ|)²/Σμ²"), ("entropy_rank", "exp(spectral entropy)"),
         ("stable_rank", "stable rank ‖H‖²_F / ‖H‖²₂"))


def figure_distributions(df: pd.DataFrame, block: dict, claims: list, pdf: str, png: str) -> None:
    r_ref, ref = at_reference(df, block)
    style.use()
    fig = plt.figure(figsize=(10.4, 6.4))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 0.9])
    ax_pl, ax_sm, ax_rk = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])
    _hist(ax_pl, ref["predicted_looseness"], "tab:blue", log=True)
    _paper_range_x(ax_pl, claim(claims, "block_predicted_looseness"))
    ax_pl.set_xlabel("predicted looseness (per-op sum / joint max)")
    _hist(ax_sm, ref["softmax_ratio"], "tab:purple")
    _paper_range_x(ax_sm, claim(claims, "block_softmax_one_op"))
    ax_sm.set_xlabel("per-op sum with softmax as one op / per-op sum")
    for ax in (ax_pl, ax_sm):
        ax.set_ylabel("units")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)  # room for the paper's bracket along the top
        style.legend_below(ax, ncol=2)
    rows = [(col, label) for col, label in RANKS if col in ref]
    rng = np.random.default_rng(0)
    for k, (col, label) in enumerate(rows):
        v = ref[col].to_numpy(dtype=float)
        ax_rk.scatter(v, k + rng.uniform(-0.18, 0.18, len(v)), s=14, color=f"C{k + 2}", alpha=0.7,
                      zorder=style.Z_OURS)
        med = float(np.median(v))
        ax_rk.plot([med, med], [k - 0.32, k + 0.32], color="black", lw=2.2, zorder=style.Z_OURS + 0.1)
        ax_rk.annotate(f"median {med:.3g}", (med, k + 0.32), xytext=(4, 0), textcoords="offset points",
                       va="bottom", fontsize=style.FONT["note"])
    c = claim(claims, "block_effective_rank")
    if (r := _range_of(c)) is not None:
        ax_rk.fill_betweenx([-0.6, len(rows) - 0.4], r[0], r[1], facecolor="none", edgecolor="black",
                            hatch="///", lw=0.8, alpha=0.25, zorder=style.Z_PAPER,
                            label=f"paper (GPT-2 small, definition not stated): range {r[0]:g}–{r[1]:g}")
        if r[2] is not None:
            ax_rk.axvline(r[2], color="black", ls="--", lw=1.2, zorder=style.Z_PAPER,
                          label=f"paper median {r[2]:g}")
    ax_rk.set_yticks(range(len(rows)), [label for _, label in rows])
    ax_rk.set_ylim(-0.6, len(rows) - 0.4)
    ax_rk.set_xscale("log")
    plain_log_axis(ax_rk)
    ax_rk.set_xlabel("effective rank of the Hessian (three definitions; bar: our median)")
    ax_rk.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2, fontsize=style.FONT["legend"])
    fig.suptitle(f"Block residual: predicted looseness, softmax as one op, effective rank (r = {r_ref:g})\n"
                 f"{style.wrap(grid_label(df))}")
    save_figure(fig, pdf, png)


def figure_crown_over_perop(df: pd.DataFrame, claims: list, pdf: str, png: str) -> None:
    """CROWN / per-op sum (the paper's quantity: its range over r ≤ 1e-3 drawn over those radii only), CROWN
    over its own r² term, and |ascent max / second-order term − 1| (the paper's range over r ≤ 1e-3 too)."""
    radii = sorted(df["radius"].unique())
    pos = np.log10(radii)
    style.use()
    fig, axes = plt.subplots(1, 3, figsize=(10.6, 4.6))
    covered = [p for p, r in zip(pos, radii) if r <= PAPER_MAX_RADIUS * (1 + 1e-9)]

    def boxes(ax, data, log=False):
        ax.boxplot(data, positions=pos, widths=0.15, medianprops=dict(color="black"), zorder=style.Z_OURS)
        ax.set_xticks(pos, [f"{r:g}" for r in radii])
        ax.set_xlabel("radius r (l∞)")
        if log:
            ax.set_yscale("log")

    def paper(ax, cid):
        if covered and (r := _range_of(claim(claims, cid))) is not None:
            style.paper_range(ax, covered[0] - 0.2, covered[-1] + 0.2, r[0], r[1], median=r[2],
                              label=f"paper (GPT-2 small), r ≤ {PAPER_MAX_RADIUS:g}: {r[0]:g}–{r[1]:g}")

    boxes(axes[0], [df.loc[np.isclose(df["radius"], r), "crown_over_perop"].dropna() for r in radii])
    paper(axes[0], "block_crown_over_perop")
    axes[0].set_title("CROWN bound / per-op sum")
    boxes(axes[1], [df.loc[np.isclose(df["radius"], r), "crown_over_leading_order"].dropna() for r in radii])
    axes[1].axhline(1.0, color="k", ls=":", lw=0.8, label="1: CROWN equals its r² term")
    axes[1].set_title("CROWN bound / CROWN's leading\norder (r² term)")
    dev = df.assign(abs_dev=df["second_order_dev"].abs().clip(lower=1e-8))
    boxes(axes[2], [dev.loc[np.isclose(dev["radius"], r), "abs_dev"] for r in radii], log=True)
    paper(axes[2], "block_second_order_match")
    axes[2].set_title("|ascent max / second-order term − 1|")
    for ax in axes:
        ax.set_xlim(pos[0] - 0.35, pos[-1] + 0.35)
        if ax.get_legend_handles_labels()[0]:
            style.legend_below(ax, ncol=1)
    axes[0].set_ylabel("ratio over units (boxes: quartiles)")
    fig.suptitle("Block residual: CROWN vs the per-operation sum and its own leading order; the second-order "
                 f"regime\n{style.wrap(grid_label(df))}")
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
    """Bound on max f / ascent maximum of f against the radius: the second-order certificate (the reported one),
    CROWN, alpha-CROWN where run, the per-operation sum; the paper's implied CROWN
    looseness (its CROWN / per-op median times its per-op / joint maximum median) where the claims give them. Right:
    the gap on g over the linear movement, certificate vs CROWN."""
    radii = sorted(df["radius"].unique())
    style.use()
    fig, axes = plt.subplots(1, 2, figsize=(10.6, 5.4))
    ax = axes[0]
    cert = style.method_name("certificate")
    colour_of = style.method_color
    series = [("second_order_certificate_looseness", f"{cert} (second order, sound)", colour_of("certificate"), "o",
               "-"),
              ("crown_looseness", "CROWN", colour_of("crown"), "^", "-"),
              ("alpha_crown_looseness", "α-CROWN", colour_of("alpha_crown"), "v", "--"),
              ("per_op_looseness", "per-operation sum (not a bound; CROWN's r² floor)", colour_of("per_op"), "x",
               "--")]
    finite_top = 1.0
    for col, label, color, marker, ls in series:
        if col not in df or not np.isfinite(df[col]).any():
            continue
        q = _quantiles(df, col, radii)
        ok = np.isfinite(q[1])
        if col == "alpha_crown_looseness":       # drawn over CROWN: say how close, so that a hidden line is read
            dev = np.nanmax(np.abs(q[1] / _quantiles(df, "crown_looseness", radii)[1] - 1))
            label = f"{label} (medians within {100 * dev:.2g}% of CROWN's)"
        ax.plot(np.array(radii)[ok], q[1, ok], color=color, marker=marker, ls=ls, lw=1.6, ms=5, zorder=style.Z_OURS,
                mfc="none" if col == "alpha_crown_looseness" else color, label=f"{label}: median")
        band = np.isfinite(q[0]) & np.isfinite(q[2])
        if band.any():
            ax.fill_between(np.array(radii)[band], q[0, band], q[2, band], color=color, alpha=0.12, lw=0)
        finite_top = max(finite_top, np.nanmax(np.where(np.isfinite(q), q, np.nan)))
    infinite = []  # one note for every radius with +inf certificates (one label per radius overlapped)
    for r in radii:
        g = df[np.isclose(df["radius"], r)]
        n_inf = int((~np.isfinite(g["second_order_certificate_f"])).sum())
        if n_inf:
            infinite.append(f"{n_inf} of {len(g)} at r = {r:g}")
    capped = [f"{int(g['from_range_f'].fillna(False).astype(bool).sum())} of {len(g)} at r = {r:g}"
              for r in radii for g in [df[np.isclose(df["radius"], r)]]
              if "from_range_f" in g and g["from_range_f"].fillna(False).astype(bool).any()]
    notes = ([f"{cert} +inf (not drawn):"] + infinite if infinite else []) + \
        (["capped by the output LayerNorm's range:"] + capped if capped else [])
    if notes:
        ax.text(0.02, 0.6, "\n".join(notes), transform=ax.transAxes,
                ha="left", va="top", fontsize=style.FONT["note"], color=style.method_color("certificate"),
                bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=1.5))
    ax.axhline(1.0, color="k", lw=0.8, label="ascent maximum (a lower bound on max f)")
    c_crown, c_pred = claim(claims, "block_crown_over_perop"), claim(claims, "block_predicted_looseness")
    med = lambda c: c.get("value", {}).get("median") if isinstance(c.get("value"), dict) else None  # noqa: E731
    if med(c_crown) is not None and med(c_pred) is not None:
        small = [r for r in radii if r <= 1e-3 * (1 + 1e-12)] or radii
        ax.hlines(med(c_crown) * med(c_pred), small[0], small[-1], color=style.PAPER_COLOR, ls="--", lw=1.4,
                  zorder=style.Z_PAPER, label=f"paper, GPT-2 small, r ≤ 1e-3: CROWN implied by its medians,\n"
                  f"(CROWN / per-op sum {med(c_crown):g}) × (per-op sum / joint max {med(c_pred):g}) "
                  f"≈ {med(c_crown) * med(c_pred):.0f}")
        ax.hlines(med(c_pred), small[0], small[-1], color=style.PAPER_COLOR, ls="-.", lw=1.4, zorder=style.Z_PAPER,
                  label=f"paper, GPT-2 small, r ≤ 1e-3: per-op sum / joint maximum ≈ {med(c_pred):g} (median)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(radii, [f"{r:g}" for r in radii])
    plain_log_axis(ax, "x")
    ax.set_xlabel("radius r (l∞ box on the query token's residual stream)")
    ax.set_ylabel("bound on max f / ascent maximum of f")
    ax.set_ylim(0.7, finite_top * 3)
    ax.set_title("bound / ascent maximum\n(lines: medians; shaded: quartiles over units)")
    style.legend_below(ax)
    ax = axes[1]
    for col, label, color, marker in (("certificate_gap_g", cert, style.method_color("certificate"), "o"),
                                      ("crown_gap_g", "CROWN", style.method_color("crown"), "^")):
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
    ax.set_title("gap on g over the linear movement\n(no paper value)")
    style.legend_below(ax)
    fig.suptitle("Block certificate (beyond the paper) vs CROWN"
                 + (" and α-CROWN" if np.isfinite(df["alpha_crown_upper"]).any() else " (α-CROWN not run)")
                 + f"\n{style.wrap(grid_label(df))}")
    save_figure(fig, pdf, png)


#: figure name (= file name under figures/block/{model}/) -> drawing function (names: `figure_names.FIGURE_NAMES`)
FIGURES = {
    "crown_vs_predicted_looseness": lambda df, block, claims, pdf, png: figure_crown_vs_predicted(df, block, pdf,
                                                                                                  png),
    "looseness_and_rank": figure_distributions,
    "crown_over_per_op_sum": lambda df, block, claims, pdf, png: figure_crown_over_perop(df, claims, pdf, png),
    "certificate_vs_radius": lambda df, block, claims, pdf, png: figure_certificate_vs_radius(df, claims, pdf,
                                                                                              png),
}


def draw(name: str, df: pd.DataFrame, block: dict, claims: list, pdf: str, png: str) -> None:
    """One block figure by name (the keys of FIGURES); `df` already `report.derive`d."""
    if name not in FIGURES:
        raise ValueError(f"unknown block figure {name!r}; known: {sorted(FIGURES)}")
    FIGURES[name](df, block, claims, pdf, png)
