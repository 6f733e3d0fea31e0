"""Figures of the certification stage (Paper A): relative gap vs radius, gap over the secant-slack bound,
share of units certified within a fraction of their movement range.

Inputs: the concatenated per-layer tables `data/certify/{model}/layer{L}.csv` and Paper A's claims
(`claim_dicts(data/paper_claims.yaml, "paper_a")`): wherever a claim has a number at a plotted point, the
paper's value is drawn as a labelled marker beside ours (`paper_marks`). Every figure title names the
model and the grid, so embedded-model results are never read as GPT-2's; legends sit outside the axes.
Names, colours, sizes and the paper's marks: `figure_style.style` (the paper's marks under our series). A median
or slope computed from gaps below the solver noise floor (`reporting.noise_floor`, docs/certificate.md §6.1)
is never shown as a result: its marker is hollow, its slope is not given, and a ratio whose gap is below the floor
is drawn apart from the distribution.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from attncert.certify.paper_marks import paper_points, paper_shares  # noqa: E402
from attncert.certify.spread_figure import figure_gap_spread  # noqa: E402
from attncert.figure_style import style  # noqa: E402
from attncert.reporting.report_files import grid_label, save_figure  # noqa: E402
from attncert.reporting.table_legend import floor_words  # noqa: E402
from attncert.reporting.noise_floor import (SOLVER_NOISE, at_floor_count, gaps_with_floor,  # noqa: E402
                                            slope_below_floor)
from attncert.reporting.unit_tables import add_gaps, per_unit_slopes, share_within  # noqa: E402

CERTS = {c: style.method_label(c) for c in ("first_order", "second_order", "second_order_tight")}
COLORS = {c: style.method_color(c) for c in CERTS}


def legend_below(ax, ncol: int = 1, handles=None, labels=None) -> None:
    """The legend under the axes, where it cannot cover a line or the axis label."""
    style.legend_below(ax, ncol=ncol, handles=handles, labels=labels)


def floor_medians(sub: pd.DataFrame, cert: str) -> pd.Series:
    """Per radius: whether the median relative gap of `cert` is at the noise floor (at least half of the units)."""
    flags = sub[f"below_floor_{cert}"]
    return flags.groupby(sub["radius"]).agg(lambda f: at_floor_count(f.sum(), len(f)))


def slope_label(sub: pd.DataFrame, cert: str, slope_max_radius: float) -> str:
    """'gap slope 2.01', or why no slope is given (at least half of the units' slopes run through a gap below the
    noise floor)."""
    flags = slope_below_floor(sub, f"below_floor_{cert}", slope_max_radius)
    if at_floor_count(flags.sum(), len(flags)):
        return "no gap slope (gaps at the noise floor)"
    return f"gap slope {per_unit_slopes(sub, f'gap_{cert}', slope_max_radius).median():.2f}"


def figure_relative_gap(df: pd.DataFrame, model: str, out_pdf, slope_max_radius: float = 0.005, claims=()):
    """Relative gap vs radius, log-log: medians with quartile bands, per-unit slope medians annotated; the
    paper's second-order relative gaps (fixed query) as marks under ours; the varying-query panel says the
    paper has no value there. The shaded part of each panel: the radii of the slope fits. The solver noise floor
    (median over units, relative to the movement) as a dotted line; a median at it is hollow and its slope not
    given."""
    g = gaps_with_floor(df)
    modes = [m for m in ("fixed", "varying") if m in set(g["mode"])]
    style.use()
    fig, axes = plt.subplots(1, len(modes), figsize=style.figsize(len(modes), 1, 5.2, 4.4, 0.6), squeeze=False,
                             sharey=True)
    for ax, mode in zip(axes[0], modes):
        sub = g[g["mode"] == mode]
        floored = False
        for cert, label in CERTS.items():
            col = f"rel_gap_{cert}"
            if col not in sub or sub[col].notna().sum() == 0:
                continue
            vals = sub[sub[col] > 0]
            q = vals.groupby("radius")[col].quantile([0.25, 0.5, 0.75]).unstack()
            ax.plot(q.index, q[0.5], "o-", color=COLORS[cert], zorder=style.Z_OURS,
                    label=f"{label}: {slope_label(sub, cert, slope_max_radius)}")
            ax.fill_between(q.index, q[0.25], q[0.75], color=COLORS[cert], alpha=0.18, lw=0)
            at_floor = floor_medians(sub, cert).reindex(q.index, fill_value=False)
            floored |= style.floor_points(ax, q.index, q[0.5], at_floor, COLORS[cert]) is not None
        floor = (sub["noise_floor"] / sub["movement"]).groupby(sub["radius"]).median()
        ax.plot(floor.index, floor.values, ":", color="0.35", lw=1.3, zorder=style.Z_OURS - 0.5,
                label=f"solver noise floor ({floor_words(SOLVER_NOISE)} of the objective unit; median)")
        if floored:
            ax.plot([], [], ls="none", marker="o", mfc="white", mec="0.3", mew=1.5, label=style.FLOOR_LABEL)
        if mode == "fixed" and (points := paper_points(claims, "second_order_rel_gap_r")):
            r, v = zip(*points)
            style.paper_marker(ax, r, v, scatter=True, note="paper {y:g}", note_side="left",
                               label="paper, second order (GPT-2 small): "
                               + ", ".join(f"{y:g} at r = {x:g}" for x, y in points))
        mslope = per_unit_slopes(sub, "movement", slope_max_radius).median()
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius r")
        ref = "exact worst case" if mode == "fixed" else "best feasible (ascent)"
        ax.set_title(f"{mode} query: gap vs {ref} (movement slope {mslope:.2f})")
        if mode != "fixed":
            style.no_paper_value(ax, "the paper states no varying-query gap")
        ax.axvspan(ax.get_xlim()[0], slope_max_radius, color="0.5", alpha=0.08, lw=0,
                   label=f"shaded: r ≤ {slope_max_radius:g}, the radii of the slope fits")
        legend_below(ax)
    axes[0][0].set_ylabel("relative gap\n(certificate − reference) / movement range")
    fig.suptitle(f"Certificate looseness vs radius — {grid_label(df, model)}\n"
                 f"median and quartiles over units; slopes: per-unit log-log fits over r ≤ {slope_max_radius}")
    save_figure(fig, out_pdf)


def figure_gap_over_secant(df: pd.DataFrame, model: str, out_pdf, claims=()):
    """Distribution of (second-order gap) / (secant-slack bound) on fixed-query units, per radius; the
    paper's largest ratio as a line (a maximum over all radii, not a point). Title and panel count the same
    units: the fixed-query ones (the varying query has no secant-slack bound). A unit whose gap is below the solver
    noise floor has no meaningful ratio: it is drawn as a hollow point beside the boxes, which (and the title's
    largest ratio) hold the other units only."""
    g = gaps_with_floor(df)
    fixed = g[g["mode"] == "fixed"]
    sub = fixed[fixed["secant_bound"].notna() & (fixed["secant_bound"] > 0)].copy()
    sub["ratio"] = sub["gap_second_order"] / sub["secant_bound"]
    noise = sub[sub["below_floor_second_order"]]
    sub = sub[~sub["below_floor_second_order"]]
    style.use()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    radii = sorted(set(sub["radius"]) | set(noise["radius"]))
    if radii:
        at = {r: i for i, r in enumerate(radii)}
        if len(sub):
            kept = [r for r in radii if (sub["radius"] == r).any()]
            ax.boxplot([sub.loc[sub["radius"] == r, "ratio"] for r in kept], positions=[at[r] for r in kept],
                       widths=0.55, patch_artist=True, flierprops=dict(ms=2.5, mec="0.3"),
                       boxprops=dict(facecolor=style.method_color("second_order"), alpha=0.75),
                       medianprops=dict(color="black"), zorder=style.Z_OURS)
        if len(noise):  # beside the box where there is one, at the radius otherwise
            boxed = set(sub["radius"])
            ax.plot([at[r] + (0.38 if r in boxed else 0.0) for r in noise["radius"]], noise["ratio"], ls="none",
                    marker="o", ms=4.5,
                    mfc="white", mec=style.method_color("second_order"), mew=1.2, zorder=style.Z_OURS,
                    label=f"gap below the solver noise floor: ratio not meaningful ({len(noise)} units)")
        ax.set_xticks(range(len(radii)), [f"{r:g}" for r in radii])
        ax.axhline(1.0, color="crimson", ls="--", lw=1, label="secant-slack bound (ratio 1)")
        paper_max = next((c["value"] for c in claims or () if c["id"] == "gap_over_secant_max"), None)
        if isinstance(paper_max, (int, float)):
            ax.axhline(paper_max, color=style.PAPER_COLOR, ls=":", lw=1.4, zorder=style.Z_PAPER,
                       label=f"paper's largest ratio ({paper_max:g}, GPT-2 small)")
        n = len(sub) + len(noise)
        dropped = f" (of {len(fixed)}: the others have no positive bound)" if n < len(fixed) else ""
        top = f"max ratio {sub['ratio'].max():.3f} over {len(sub)}" if len(sub) else "no ratio above the noise floor"
        below = f", {len(noise)} at the noise floor" if len(noise) else ""
        ax.set_title(f"{top} of {n} fixed-query units{below}{dropped}")
        legend_below(ax, ncol=2)
    ax.set_ylabel("second-order gap / secant-slack bound")
    ax.set_xlabel("radius r")
    fig.suptitle(f"Gap vs value-weighted secant-slack bound, fixed query only\n{grid_label(fixed, model)}",
                 fontsize=style.FONT["title"])
    save_figure(fig, out_pdf)


def figure_certified_within(df: pd.DataFrame, model: str, out_pdf, claims=()):
    """Share of units certified within 10% and 1% of their movement range, per radius; the paper's shares
    under ours: a share it states as a value as an open mark, a share it bounds ("> 0.5") as a bar with an
    arrow (not a measured point)."""
    g = add_gaps(df)
    style.use()
    modes = [m for m in ("fixed", "varying") if m in set(g["mode"])]
    fig, axes = plt.subplots(1, len(modes), figsize=style.figsize(len(modes), 1, 5.2, 4.0, 0.6), squeeze=False,
                             sharey=True)
    for ax, mode in zip(axes[0], modes):
        sub = g[g["mode"] == mode]
        for cert, ls in (("second_order", "-"), ("first_order", "--")):
            if f"rel_gap_{cert}" not in sub:
                continue
            for frac, marker in ((0.10, "o"), (0.01, "s")):
                s = share_within(sub, cert, frac)
                ax.plot(s.index, s.values, ls=ls, marker=marker, color=COLORS[cert], zorder=style.Z_OURS,
                        label=f"{style.method_name(cert)} within {int(frac * 100)}%")
        handles, labels = ax.get_legend_handles_labels()
        if mode == "fixed":  # the paper's shares are fixed-query claims
            for label, at, share, within in paper_shares(claims, sorted(set(sub["radius"]))):
                op = label.split(": ")[1].split(" ")[0]
                bound = op if op in (">", "≥") else None
                style.paper_marker(ax, at, [share] * len(at), bound=bound, scatter=True, label=None)
                handles.append(style.paper_handle(bound))
                labels.append(label + (" (a lower bound)" if bound else ""))
        ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.08)
        ax.set_xlabel("radius r")
        ax.set_title(f"{mode} query")
        if mode != "fixed":
            style.no_paper_value(ax, "the paper's shares are fixed-query")
        legend_below(ax, ncol=1 if mode == "fixed" else 2, handles=handles, labels=labels)
    axes[0][0].set_ylabel("share of units")
    fig.suptitle(f"Units certified within 10% / 1% of their movement range\n{grid_label(df, model)}")
    save_figure(fig, out_pdf)


#: figure name (= file name under figures/certify/{model}/) -> drawing function (names: `figure_names.FIGURE_NAMES`)
FIGURES = {"relative_gap_vs_radius": figure_relative_gap, "gap_over_secant_bound": figure_gap_over_secant,
           "certified_within": figure_certified_within, "relative_gap_spread": figure_gap_spread}


def draw(name: str, df: pd.DataFrame, model: str, out_pdf, claims=()) -> None:
    """One certification figure by name (the keys of FIGURES); claims: Paper A's (`claim_dicts`)."""
    if name not in FIGURES:
        raise ValueError(f"unknown certification figure {name!r}; known: {sorted(FIGURES)}")
    FIGURES[name](df, model, out_pdf, claims=claims)
