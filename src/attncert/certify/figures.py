"""Figures and the summary table of the certification stage (Paper A, second-order certificate).

Inputs: the concatenated per-layer tables `data/certify/{model}/layer{L}.csv`. Every figure title and
table header names the model and the grid, so embedded-model results are never read as GPT-2's.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from attncert.pipeline.report_files import grid_label, load_tables, save_figure, write_table  # noqa: E402,F401
from attncert.pipeline.unit_tables import add_gaps, per_unit_slopes, share_within, soundness_violations  # noqa: E402

CERTS = {"first_order": "first-order (greedy LP)", "second_order": "second-order (exp-cone moments)"}
COLORS = {"first_order": "#d95f02", "second_order": "#1b9e77"}


def figure_relative_gap(df: pd.DataFrame, model: str, out_pdf, slope_max_radius: float = 0.005):
    """Relative gap vs radius, log-log: medians with quartile bands, per-unit slope medians annotated."""
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
        mslope = per_unit_slopes(sub, "movement", slope_max_radius).median()
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius r")
        ref = "exact worst case" if mode == "fixed" else "best feasible (ascent)"
        ax.set_title(f"{mode} query (gap vs {ref}; movement slope {mslope:.2f})", fontsize=10)
        ax.axvline(slope_max_radius, color="grey", ls=":", lw=1)
        ax.legend(fontsize=8, loc="lower right")
    axes[0][0].set_ylabel("relative gap  (certificate − reference) / movement range")
    fig.suptitle(f"Certificate looseness vs radius — {grid_label(df, model)}\n"
                 f"median and quartiles over units; slopes: per-unit log-log fits over r ≤ {slope_max_radius}",
                 fontsize=10, y=1.04)
    save_figure(fig, out_pdf)


def figure_gap_over_secant(df: pd.DataFrame, model: str, out_pdf):
    """Distribution of (second-order gap) / (secant-slack bound) on fixed-query units, per radius."""
    g = add_gaps(df)
    sub = g[(g["mode"] == "fixed") & g["secant_bound"].notna() & (g["secant_bound"] > 0)].copy()
    sub["ratio"] = sub["gap_second_order"] / sub["secant_bound"]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(7, 4.4))
    if len(sub):
        sns.boxplot(data=sub, x="radius", y="ratio", ax=ax, color="#7570b3", fliersize=2)
        ax.axhline(1.0, color="crimson", ls="--", lw=1, label="secant-slack bound (ratio 1)")
        ax.axhline(0.78, color="grey", ls=":", lw=1, label="paper's maximum (0.78, GPT-2)")
        ax.set_title(f"max ratio {sub['ratio'].max():.3f} over {len(sub)} units", fontsize=10)
        ax.legend(fontsize=8)
    ax.set_ylabel("second-order gap / secant-slack bound")
    ax.set_xlabel("radius r")
    fig.suptitle(f"Gap vs value-weighted secant-slack bound (fixed query) — {grid_label(df, model)}", fontsize=9, y=1.02)
    save_figure(fig, out_pdf)


def figure_certified_within(df: pd.DataFrame, model: str, out_pdf):
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
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("radius r")
        ax.set_title(f"{mode} query", fontsize=10)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("share of units")
    fig.suptitle(f"Units certified within 10% / 1% of their movement range — {grid_label(df, model)}", fontsize=9, y=1.02)
    save_figure(fig, out_pdf)


def summary_table(df: pd.DataFrame, model: str, slope_max_radius: float = 0.005) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per mode and radius: medians of relative gaps, shares within 10%/1%, secant ratio, timings;
    and per mode the medians of the per-unit log-log slopes."""
    g = add_gaps(df)
    rows = []
    for (mode, r), sub in g.groupby(["mode", "radius"]):
        row = {"model": model, "mode": mode, "radius": r, "units": len(sub),
               "median_rel_gap_first": sub["rel_gap_first_order"].median(),
               "median_rel_gap_second": sub["rel_gap_second_order"].median(),
               "max_rel_gap_second": sub["rel_gap_second_order"].max(),
               "share_within_10pct": (sub["rel_gap_second_order"] <= 0.10).mean(),
               "share_within_1pct": (sub["rel_gap_second_order"] <= 0.01).mean(),
               "max_gap_over_secant": (sub["gap_second_order"] / sub["secant_bound"]).max() if mode == "fixed" else np.nan,
               "median_bracket_over_movement": ((sub["exact_hi"] - sub["exact_lo"]) / sub["movement"]).median()
               if mode == "fixed" else np.nan,
               "median_t_exact_s": sub["t_exact_s"].median(), "median_t_first_s": sub["t_first_s"].median(),
               "median_t_second_s": sub["t_second_s"].median(),
               "status_not_ok": int((sub["status"] != "ok").sum())}
        rows.append(row)
    table = pd.DataFrame(rows)
    slopes = []
    for mode, sub in g.groupby("mode"):
        slopes.append({"model": model, "mode": mode, "fit_radii": f"r ≤ {slope_max_radius}",
                       "slope_first": per_unit_slopes(sub, "gap_first_order", slope_max_radius).median(),
                       "slope_second": per_unit_slopes(sub, "gap_second_order", slope_max_radius).median(),
                       "slope_movement": per_unit_slopes(sub, "movement", slope_max_radius).median()})
    return table, pd.DataFrame(slopes)


PAPER_ROWS = [
    ("relative gap, second order, r = 0.002 (median)", "0.004", "median_rel_gap_second", ("fixed", 0.002)),
    ("relative gap, second order, r = 0.02 (median)", "0.048", "median_rel_gap_second", ("fixed", 0.02)),
    ("per-unit slope of the second-order gap", "2.04", "slope_second", "fixed"),
    ("per-unit slope of the first-order gap", "1.04", "slope_first", "fixed"),
    ("per-unit slope of the movement range", "1.00", "slope_movement", "fixed"),
    ("max gap / secant-slack bound", "0.78", "max_gap_over_secant", "fixed"),
    ("share within 10% at r ≤ 0.002", "1.00 (every unit)", "within10_small", "fixed"),
    ("share within 1% at r = 0.001", "> 0.5", "share_within_1pct", ("fixed", 0.001)),
    ("exact bracket / movement range (median)", "6e-10", "median_bracket_over_movement", "fixed"),
]


def paper_comparison(table: pd.DataFrame, slopes: pd.DataFrame, df: pd.DataFrame, model: str) -> pd.DataFrame:
    g = add_gaps(df)
    fixed = g[g["mode"] == "fixed"]
    slope_row = slopes[slopes["mode"] == "fixed"]
    lookup = {
        **{k: (slope_row[k].iloc[0] if len(slope_row) else np.nan)
           for k in ("slope_second", "slope_first", "slope_movement")},
        "max_gap_over_secant": (fixed["gap_second_order"] / fixed["secant_bound"]).max(),
        "within10_small": (fixed[fixed["radius"] <= 0.002 + 1e-12]["rel_gap_second_order"] <= 0.10).mean(),
        "median_bracket_over_movement": ((fixed["exact_hi"] - fixed["exact_lo"]) / fixed["movement"]).median(),
    }
    rows = []
    for what, paper, key, where in PAPER_ROWS:
        if isinstance(where, tuple):
            sel = table[(table["mode"] == where[0]) & np.isclose(table["radius"], where[1])]
            ours = sel[key].iloc[0] if len(sel) else np.nan
        else:
            ours = lookup[key]
        rows.append({"quantity": what, "paper (GPT-2 small, 2,880 units at query position 4)": paper,
                     f"ours ({model})": ours})
    return pd.DataFrame(rows)


def violations_table(df: pd.DataFrame) -> pd.DataFrame:
    return soundness_violations(df)


def paper_measurements(df: pd.DataFrame, table: pd.DataFrame, slopes: pd.DataFrame) -> dict:
    """Our values for the claim ids of data/paper_claims.yaml (certification stage)."""
    g = add_gaps(df)
    fixed = g[g["mode"] == "fixed"]

    def at(mode, r, col):
        sel = table[(table["mode"] == mode) & np.isclose(table["radius"].astype(float), r)]
        return float(sel[col].iloc[0]) if len(sel) else None

    srow = slopes.set_index("mode")
    width = (fixed["exact_hi"] - fixed["exact_lo"]) / fixed["value_spread"]
    small = fixed[fixed["radius"] <= 0.002 + 1e-12]
    return {
        "exact_bracket_width": float(width.max()),
        "exact_bracket_median_vs_movement": float(((fixed["exact_hi"] - fixed["exact_lo"]) / fixed["movement"]).median()),
        "second_order_rel_gap_r0.002": at("fixed", 0.002, "median_rel_gap_second"),
        "second_order_rel_gap_r0.02": at("fixed", 0.02, "median_rel_gap_second"),
        "second_order_slope": float(srow.loc["fixed", "slope_second"]) if "fixed" in srow.index else None,
        "first_order_slope": float(srow.loc["fixed", "slope_first"]) if "fixed" in srow.index else None,
        "movement_range_slope": float(srow.loc["fixed", "slope_movement"]) if "fixed" in srow.index else None,
        "gap_over_secant_max": float((fixed["gap_second_order"] / fixed["secant_bound"]).max()),
        "within_10pct_small_r": float((small["rel_gap_second_order"] <= 0.10).mean()) if len(small) else None,
        "within_1pct_r0.001": at("fixed", 0.001, "share_within_1pct"),
        "cert_seconds_fixed": float(g.loc[g["mode"] == "fixed", "t_second_s"].median()),
        "cert_seconds_varying": float(g.loc[g["mode"] == "varying", "t_second_s"].median()),
    }
