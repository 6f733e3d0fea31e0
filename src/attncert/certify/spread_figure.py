"""The spread of the per-unit relative gap of every certificate, per radius and query mode (seaborn box and strip
plots): what the medians of `relative_gap_vs_radius` leave out, the whole distribution over the units.

Per unit, relative gap = (certificate − reference) / movement range, the reference being the exact worst case
(fixed query) or the best value ascent found (varying query). Boxes span the quartiles, whiskers the smallest and
largest unit, every unit is a dot. The paper's statements about this distribution (fixed query, second order, on
GPT-2 small) are drawn at the second-order boxes, under ours: its medians as open diamonds, and its "every unit
within 10%" (a bound on the largest unit) and "more than half within 1%" (a bound on the median) as bars with an
arrow towards the side they allow. Names, colours and the paper's marks: `figure_style.style`.
"""
from __future__ import annotations

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from attncert.certify.paper_marks import paper_points, paper_shares  # noqa: E402
from attncert.figure_style import style  # noqa: E402
from attncert.reporting.report_files import grid_label, save_figure  # noqa: E402
from attncert.reporting.unit_tables import add_gaps  # noqa: E402

CERTS = ("first_order", "second_order", "second_order_tight")
BOX_WIDTH = 0.8
PAPER_CERT = "second_order"  # the certificate the paper's relative gaps are about


def long_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (unit, certificate): mode, radius, certificate, rel_gap (NaN rows dropped)."""
    g = add_gaps(df)
    certs = [c for c in CERTS if f"rel_gap_{c}" in g and g[f"rel_gap_{c}"].notna().any()]
    out = g.melt(id_vars=["mode", "radius"], value_vars=[f"rel_gap_{c}" for c in certs], var_name="certificate",
                 value_name="rel_gap")
    out["certificate"] = out["certificate"].str.removeprefix("rel_gap_")
    return out.dropna(subset=["rel_gap"])


def paper_bounds(claims, radii) -> list[tuple[list[float], float, str]]:
    """([radii], bound on the relative gap, what it bounds) from the paper's shares certified within a fraction
    of the movement: a share of 1 bounds the largest unit, a share of one half the median."""
    out = []
    for _, at, share, within in paper_shares(claims, radii):
        what = "every unit" if share >= 1 else "median"
        out.append((at, float(within.rstrip("%")) / 100, what))
    return out


def _x(radii: list[float], cert: str, certs: list[str]) -> dict[float, float]:
    """The x position of `cert`'s box at each radius (seaborn's dodged categorical positions)."""
    w = BOX_WIDTH / len(certs)
    off = -BOX_WIDTH / 2 + w * (certs.index(cert) + 0.5)
    return {r: i + off for i, r in enumerate(radii)}


def figure_gap_spread(df: pd.DataFrame, model: str, out_pdf, claims=()) -> None:
    """Box and strip plots of the per-unit relative gap per radius, certificate and query mode (log scale)."""
    data = long_table(df)
    drawn = (data["rel_gap"] > 0) & np.isfinite(data["rel_gap"])  # what a log axis can show
    shown = data[drawn]
    modes = [m for m in ("fixed", "varying") if m in set(data["mode"])]
    certs = [c for c in CERTS if c in set(data["certificate"])]
    palette = {style.method_label(c): style.method_color(c) for c in certs}
    order = [style.method_label(c) for c in certs]
    shown = shown.assign(method=shown["certificate"].map(style.method_label))
    style.use()
    fig, axes = plt.subplots(1, len(modes), figsize=style.figsize(len(modes), 1, 5.3, 4.3, 0.9), squeeze=False,
                             sharey=True)
    handles, labels = [], []
    for ax, mode in zip(axes[0], modes):
        sub = shown[shown["mode"] == mode]
        radii = sorted(data.loc[data["mode"] == mode, "radius"].unique())
        dropped = int((data["mode"].eq(mode) & ~drawn).sum())
        if sub.empty:
            ax.set_title(f"{mode} query: no unit with a positive finite gap ({dropped} units)")
            continue
        kw = dict(data=sub, x="radius", y="rel_gap", hue="method", hue_order=order, order=radii, palette=palette,
                  ax=ax, log_scale=True)
        sns.stripplot(**kw, dodge=True, jitter=0.09, size=1.7, alpha=0.35, zorder=style.Z_OURS, legend=False)
        sns.boxplot(**kw, width=BOX_WIDTH, whis=(0, 100), fill=False, linewidth=1.3, showfliers=False,
                    legend=not handles)
        if not handles:
            handles, labels = ax.get_legend_handles_labels()
        if ax.get_legend():
            ax.get_legend().remove()
        ax.set_xticks(range(len(radii)), [f"{r:g}" for r in radii])
        ax.set_xlabel("radius r")
        ax.set_ylabel("")
        ref = "exact worst case" if mode == "fixed" else "best ascent value"
        per_box = sub.groupby(["radius", "method"]).size().max()
        ax.set_title(f"{mode} query: gap to the {ref}, {per_box} units per box"
                     + (f"\n({dropped} with a gap ≤ 0 or not finite, not drawn on the log axis)" if dropped else ""))
        if mode == "fixed" and PAPER_CERT in certs:
            handles, labels = _paper_marks(ax, claims, radii, certs, handles, labels)
        elif mode != "fixed":
            style.no_paper_value(ax, "the paper states no varying-query gap")
    axes[0][0].set_ylabel("relative gap per unit\n(certificate − reference) / movement range")
    style.figure_legend(fig, handles, labels, ncol=2)
    fig.suptitle(f"Spread of the per-unit relative gap — {style.wrap(grid_label(df, model), 100)}\n"
                 "box: quartiles and median over units, whiskers: smallest and largest unit; dots: every unit")
    save_figure(fig, out_pdf)


def _paper_marks(ax, claims, radii, certs, handles, labels):
    """The paper's medians and bounds at the second-order boxes; returns the legend's handles and labels."""
    at = _x(radii, PAPER_CERT, certs)
    points = [(r, v) for r, v in paper_points(claims, "second_order_rel_gap_r") if r in at]
    if points:
        style.paper_marker(ax, [at[r] for r, _ in points], [v for _, v in points], scatter=True, label=None)
        handles = handles + [style.paper_handle()]
        labels = labels + ["paper (GPT-2 small), second order: median "
                           + ", ".join(f"{v:g} at r = {r:g}" for r, v in points)]
    for rs, bound, what in paper_bounds(claims, radii):
        xs = [at[r] for r in rs if r in at]
        if xs:
            style.paper_marker(ax, xs, [bound] * len(xs), bound="≤", scatter=True, label=None)
            handles = handles + [style.paper_handle("≤")]
            where = f"r ≤ {max(rs):g}" if len(rs) > 1 else f"r = {rs[0]:g}"
            labels = labels + [f"paper (GPT-2 small): {what} ≤ {bound:g} at {where} (a bound, not a value)"]
    return handles, labels
