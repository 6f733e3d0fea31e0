"""Figures of the certification stage (Paper A): relative gap vs radius, gap over the secant-slack bound,
share of units certified within a fraction of their movement range.

Inputs: the concatenated per-layer tables `data/certify/{model}/layer{L}.csv` and Paper A's claims
(`claim_dicts(data/paper_claims.yaml, "paper_a")`): wherever a claim has a number at a plotted point, the
paper's value is drawn as a labelled marker beside ours (`paper_points`). Every figure title names the
model and the grid, so embedded-model results are never read as GPT-2's; legends sit outside the axes.
"""
from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from attncert.reporting.report_files import grid_label, save_figure  # noqa: E402
from attncert.reporting.unit_tables import add_gaps, per_unit_slopes, share_within  # noqa: E402

CERTS = {"first_order": "first-order (greedy LP)", "second_order": "second-order (exp-cone moments)",
         "second_order_tight": "second-order tight (+ upper exp cone; beyond the paper)"}
COLORS = {"first_order": "#d95f02", "second_order": "#1b9e77", "second_order_tight": "#7570b3"}
PAPER_STYLE = dict(marker="*", s=220, color="black", edgecolor="white", linewidth=0.8, zorder=5)


def paper_points(claims, prefix: str) -> list[tuple[float, float]]:
    """(radius, paper value) of every claim whose id is `prefix` followed by the radius, e.g.
    second_order_rel_gap_r0.002 -> (0.002, 0.004); only single numbers (a band is not a point)."""
    out = []
    for c in claims or ():
        m = re.fullmatch(re.escape(prefix) + r"([0-9.]+)", c["id"])
        if m and isinstance(c["value"], (int, float)):
            out.append((float(m.group(1)), float(c["value"])))
    return sorted(out)


def paper_shares(claims, radii) -> list[tuple[str, list[float], float, str]]:
    """(label, radii, share, "≥" or ">") of the paper's "share certified within x%" claims, placed at the
    plotted radii their unit names (`r ≤ x`: every plotted radius up to x; `r = x`: that radius)."""
    out = []
    for cid, within in (("within_10pct_small_r", "10%"), ("within_1pct_r0.001", "1%")):
        c = next((c for c in claims or () if c["id"] == cid), None)
        if c is None:
            continue
        if m := re.search(r"r ≤ ([0-9.]+)", c["unit"]):
            at = [r for r in radii if r <= float(m.group(1)) * (1 + 1e-9)]
            where = f"r ≤ {m.group(1)}"
        elif m := re.search(r"r = ([0-9.]+)", c["unit"]):
            at = [float(m.group(1))]
            where = f"r = {m.group(1)}"
        else:
            continue
        op = ">" if c.get("strict") else "≥"
        share = "every unit" if op == "≥" and c["value"] == 1 else f"{op} {c['value']:g} of the units"
        out.append((f"paper (GPT-2 small): {share} within {within} at {where}", at, float(c["value"]), within))
    return out


def legend_below(ax, ncol: int = 1) -> None:
    """The legend under the axes, where it cannot cover a line or the axis label."""
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=ncol, frameon=False)


def figure_relative_gap(df: pd.DataFrame, model: str, out_pdf, slope_max_radius: float = 0.005, claims=()):
    """Relative gap vs radius, log-log: medians with quartile bands, per-unit slope medians annotated; the
    paper's second-order relative gaps (fixed query) as markers."""
    g = add_gaps(df)
    modes = [m for m in ("fixed", "varying") if m in set(g["mode"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4.6), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        sub = g[g["mode"] == mode]
        for cert, label in CERTS.items():
            col = f"rel_gap_{cert}"
            if col not in sub or sub[col].notna().sum() == 0:
                continue
            vals = sub[sub[col] > 0]
            q = vals.groupby("radius")[col].quantile([0.25, 0.5, 0.75]).unstack()
            slope = per_unit_slopes(sub, f"gap_{cert}", slope_max_radius).median()
            ax.plot(q.index, q[0.5], "o-", color=COLORS[cert], label=f"{label}: gap slope {slope:.2f}")
            ax.fill_between(q.index, q[0.25], q[0.75], color=COLORS[cert], alpha=0.2)
        if mode == "fixed":
            points = paper_points(claims, "second_order_rel_gap_r")
            if points:
                r, v = zip(*points)
                ax.scatter(r, v, label="paper, second order (GPT-2 small): "
                           + ", ".join(f"{y:g} at r = {x:g}" for x, y in points), **PAPER_STYLE)
                for x, y in points:
                    ax.annotate(f"paper {y:g}", (x, y), textcoords="offset points", xytext=(8, 6), fontsize=8)
        mslope = per_unit_slopes(sub, "movement", slope_max_radius).median()
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius r")
        ref = "exact worst case" if mode == "fixed" else "best feasible (ascent)"
        ax.set_title(f"{mode} query (gap vs {ref}; movement slope {mslope:.2f})", fontsize=10)
        ax.axvline(slope_max_radius, color="grey", ls=":", lw=1)
        legend_below(ax)
    axes[0][0].set_ylabel("relative gap\n(certificate − reference) / movement range")
    fig.suptitle(f"Certificate looseness vs radius — {grid_label(df, model)}\n"
                 f"median and quartiles over units; slopes: per-unit log-log fits over r ≤ {slope_max_radius}",
                 fontsize=10, y=1.04)
    save_figure(fig, out_pdf)


def figure_gap_over_secant(df: pd.DataFrame, model: str, out_pdf, claims=()):
    """Distribution of (second-order gap) / (secant-slack bound) on fixed-query units, per radius; the
    paper's largest ratio as a line (a maximum over all radii, not a point)."""
    g = add_gaps(df)
    sub = g[(g["mode"] == "fixed") & g["secant_bound"].notna() & (g["secant_bound"] > 0)].copy()
    sub["ratio"] = sub["gap_second_order"] / sub["secant_bound"]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(7, 4.4))
    if len(sub):
        sns.boxplot(data=sub, x="radius", y="ratio", ax=ax, color="#7570b3", fliersize=2)
        ax.axhline(1.0, color="crimson", ls="--", lw=1, label="secant-slack bound (ratio 1)")
        paper_max = next((c["value"] for c in claims or () if c["id"] == "gap_over_secant_max"), None)
        if isinstance(paper_max, (int, float)):
            ax.axhline(paper_max, color="black", ls=":", lw=1.2, label=f"paper's largest ratio ({paper_max:g}, GPT-2 small)")
        ax.set_title(f"max ratio {sub['ratio'].max():.3f} over {len(sub)} units", fontsize=10)
        legend_below(ax, ncol=2)
    ax.set_ylabel("second-order gap / secant-slack bound")
    ax.set_xlabel("radius r")
    fig.suptitle(f"Gap vs value-weighted secant-slack bound (fixed query) — {grid_label(df, model)}", fontsize=9, y=1.02)
    save_figure(fig, out_pdf)


def figure_certified_within(df: pd.DataFrame, model: str, out_pdf, claims=()):
    """Share of units certified within 10% and 1% of their movement range, per radius."""
    g = add_gaps(df)
    sns.set_theme(style="whitegrid", context="notebook")
    modes = [m for m in ("fixed", "varying") if m in set(g["mode"])]
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4.2), squeeze=False, sharey=True)
    for ax, mode in zip(axes[0], modes):
        sub = g[g["mode"] == mode]
        for cert, ls in (("second_order", "-"), ("first_order", "--")):
            if f"rel_gap_{cert}" not in sub:
                continue
            for frac, marker in ((0.10, "o"), (0.01, "s")):
                s = share_within(sub, cert, frac)
                ax.plot(s.index, s.values, ls=ls, marker=marker, color=COLORS[cert],
                        label=f"{CERTS[cert].split(' ')[0]} within {int(frac * 100)}%")
        if mode == "fixed":  # the paper's shares are fixed-query claims; ^ = a lower limit
            for (label, at, share, within), colour in zip(paper_shares(claims, sorted(set(sub["radius"]))),
                                                          ("black", "dimgrey")):
                ax.scatter(at, [share] * len(at), marker="^", s=110, color=colour, edgecolor="white", zorder=5,
                           label=label)
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("radius r")
        ax.set_title(f"{mode} query", fontsize=10)
        legend_below(ax, ncol=2)
    axes[0][0].set_ylabel("share of units")
    fig.suptitle(f"Units certified within 10% / 1% of their movement range — {grid_label(df, model)}", fontsize=9, y=1.02)
    save_figure(fig, out_pdf)


#: figure name (= file name under figures/certify/{model}/) -> drawing function (names: `figure_names.FIGURE_NAMES`)
FIGURES = {"relative_gap_vs_radius": figure_relative_gap, "gap_over_secant_bound": figure_gap_over_secant,
           "certified_within": figure_certified_within}


def draw(name: str, df: pd.DataFrame, model: str, out_pdf, claims=()) -> None:
    """One certification figure by name (the keys of FIGURES); claims: Paper A's (`claim_dicts`)."""
    if name not in FIGURES:
        raise ValueError(f"unknown certification figure {name!r}; known: {sorted(FIGURES)}")
    FIGURES[name](df, model, out_pdf, claims=claims)
