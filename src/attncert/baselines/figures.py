"""The baseline figure, one column per query mode, titled with the model and grid.

Top row: median relative gap vs radius of every method beside the second-order certificate. Bottom row:
the median per-unit ratio gap / certificate gap of the paper's CROWN and α-CROWN (`comparison`'s
`ratio_to_certificate`, the quantity the paper's ratios and our verdicts use), with the paper's ratios
from `data/paper_claims.yaml` drawn as labelled markers at their radii (a ratio claimed "at every radius"
as a bar at each plotted radius). Legends sit below the axes.
"""
from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from attncert.baselines.comparison import KEYS, PAPER_ALPHA_METHOD, PAPER_CROWN_METHOD  # noqa: E402
from attncert.reporting.report_files import save_figure  # noqa: E402

#: the methods of the ratio row, and the claim-id prefix of the paper's ratio for each
RATIO_METHODS = {PAPER_CROWN_METHOD: ("CROWN", "crown_over_cert_"),
                 PAPER_ALPHA_METHOD: ("α-CROWN (last layer, auto_LiRPA softmax)", "alpha_crown_over_cert_")}
RATIO_COLORS = {PAPER_CROWN_METHOD: "tab:red", PAPER_ALPHA_METHOD: "tab:blue"}
TIGHT = "second_order_tight (beyond the paper)"


def paper_ratios(claims, prefix: str, mode: str, radii) -> list[tuple[list[float], float, float]]:
    """([radii], low, high) of the paper's ratio claims `prefix{mode}` (a band at every plotted radius) and
    `prefix{mode}_r{radius}` (one value at that radius)."""
    out = []
    for c in claims or ():
        if c["id"] == f"{prefix}{mode}" and isinstance(c["value"], list):
            out.append((sorted(radii), float(min(c["value"])), float(max(c["value"]))))
        elif (m := re.fullmatch(re.escape(f"{prefix}{mode}_r") + r"([0-9.]+)", c["id"])) and isinstance(
                c["value"], (int, float)):
            out.append(([float(m.group(1))], float(c["value"]), float(c["value"])))
    return out


def _legend_below(ax, ncol: int = 2) -> None:
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=ncol, frameon=False)


def figure_gap_vs_radius(m: pd.DataFrame, label: str, out_pdf, claims=()) -> None:
    """m: `comparison.merge` of the baseline and certification tables; claims: Paper A's (`claim_dicts`)."""
    ok = m[(m["status"] == "ok") & (m["gap"] > 0)]
    cert = m.drop_duplicates(KEYS).assign(method="second_order", gap=lambda d: d["gap_second_order"],
                                          rel_gap=lambda d: d["gap_second_order"] / d["movement"])
    parts = [ok, cert[cert["gap"] > 0]]
    if "gap_second_order_tight" in m:
        tight = m.drop_duplicates(KEYS).assign(method=TIGHT, gap=lambda d: d["gap_second_order_tight"],
                                               rel_gap=lambda d: d["gap_second_order_tight"] / d["movement"])
        parts.append(tight[tight["gap"] > 0])
    allm = pd.concat(parts, ignore_index=True)
    sns.set_theme(style="whitegrid")
    modes = sorted(allm["mode"].unique())
    fig, axes = plt.subplots(2, len(modes), figsize=(6.4 * len(modes), 10.5), squeeze=False, sharey="row",
                             gridspec_kw={"hspace": 0.75})
    for col, mode in enumerate(modes):
        ax = axes[0][col]
        for method, g in allm[allm["mode"] == mode].groupby("method"):
            q = g.groupby("radius")["rel_gap"].median()
            style = dict(lw=2.6, color="black") if method == "second_order" else (
                dict(lw=2.0, color="dimgrey", ls="--") if method == TIGHT else {})
            ax.plot(q.index, q.values, marker="o", **{"ls": "-", **style}, label=method)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius r")
        ax.set_title(f"{mode} query: median relative gap", fontsize=10)
        _legend_below(ax)

        ax = axes[1][col]
        sub = ok[ok["mode"] == mode]
        radii = sorted(set(sub["radius"]))
        for method, (name, prefix) in RATIO_METHODS.items():
            g = sub[sub["method"] == method]
            if g.empty:
                continue
            q = g.groupby("radius")["ratio_to_certificate"].median()
            ax.plot(q.index, q.values, "o-", color=RATIO_COLORS[method], label=f"ours: {name} / certificate")
            claimed = paper_ratios(claims, prefix, mode, radii)
            for at, lo, hi in (c for c in claimed if c[2] > c[1]):  # a range claimed at every radius: bars
                ax.vlines(at, lo, hi, color=RATIO_COLORS[method], lw=6, alpha=0.45,
                          label=f"paper (GPT-2 small): {name} {lo:g}–{hi:g}× at every radius")
            points = sorted((c[0][0], c[1]) for c in claimed if c[2] == c[1])  # one value at one radius: stars
            if points:
                ax.scatter([r for r, _ in points], [v for _, v in points], marker="*", s=240, color=RATIO_COLORS[method],
                           edgecolor="black", linewidth=0.6, zorder=5, label=f"paper (GPT-2 small): {name} "
                           + ", ".join(f"{v:g}× at r = {r:g}" for r, v in points))
                for r, v in points:
                    ax.annotate(f"paper {v:g}×", (r, v), textcoords="offset points", xytext=(9, -4), fontsize=8)
        ax.axhline(1.0, color="grey", lw=1, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius r")
        ax.set_title(f"{mode} query: gap / certificate's gap (median per unit)", fontsize=10)
        _legend_below(ax, ncol=1)
    axes[0][0].set_ylabel("median relative gap\n(bound − reference) / movement")
    axes[1][0].set_ylabel("gap / second-order certificate's gap")
    fig.subplots_adjust(top=0.94)
    fig.suptitle(f"IBP / CROWN / α-CROWN vs the second-order certificate — {label}", fontsize=9, y=0.985)
    save_figure(fig, out_pdf)
