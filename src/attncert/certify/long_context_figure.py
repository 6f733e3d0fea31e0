"""The long-context figure: relative gap and seconds per unit against the number of keys (`figure`).

Reads the summary of `long_context_summary.summary`; the paper's own numbers are drawn beside ours where it has them.
"""
from __future__ import annotations

import pandas as pd

from attncert.certify.long_context_summary import CERTS, MODES
from attncert.reporting.noise_floor import at_floor_count


def figure(table: pd.DataFrame, label: str, out_pdf, paper: dict | None = None, model_note: str = "") -> None:
    """Relative gap and seconds per unit vs the number of keys, log-log: one row of panels per query mode (fixed,
    varying), one line per certificate and radius.

    paper: the paper's own numbers (GPT-2 small, at most 16 keys), drawn where it has them:
    {"rel_gap": {radius: median relative gap of the second-order certificate at 5 keys, fixed query},
     "seconds": {mode: median seconds per unit of the second-order certificate}}.
    model_note: appended to the title (the embedded model: "the embedded model, not GPT-2"). A median relative gap
    with at least half of its units' gaps below the solver noise floor is drawn hollow (not a result)."""
    import matplotlib
    import matplotlib.ticker
    import matplotlib.transforms

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from attncert.figure_style import style
    from attncert.reporting.report_files import save_figure

    paper = paper or {}
    modes = [m for m in MODES if m in set(table["mode"])]
    style.use()
    fig, axes = plt.subplots(len(modes), 2, figsize=(10.4, 2.9 * len(modes) + 1.5), squeeze=False)
    reference = {"fixed": ("exact_s", "exact worst case"), "varying": ("ascent_s", "best ascent")}
    radii = sorted(table["radius"].unique())
    line_styles = dict(zip(radii, (("o", "-"), ("s", "--"), ("^", ":"))))
    extra = {}  # the paper's marks and the violations: a third legend
    for row, mode in enumerate(modes):
        ax_gap, ax_sec = axes[row]
        at_mode = table[table["mode"] == mode]
        for r in sorted(at_mode["radius"].unique()):
            marker, ls = line_styles[r]
            sub = at_mode[at_mode["radius"] == r].sort_values("n_keys")
            for cert in CERTS:
                kw = dict(color=style.method_color(cert), marker=marker, ls=ls, ms=4, zorder=style.Z_OURS)
                ax_gap.loglog(sub["n_keys"], sub[f"rel_gap_{cert}"], **kw)
                ax_sec.loglog(sub["n_keys"], sub[f"{cert}_s"], **kw)
                if f"below_floor_{cert}" in sub:
                    at = [at_floor_count(b, u) for b, u in zip(sub[f"below_floor_{cert}"], sub["units"])]
                    if style.floor_points(ax_gap, sub["n_keys"], sub[f"rel_gap_{cert}"], at, style.method_color(cert),
                                          marker=marker, ms=5) is not None:
                        extra.setdefault(style.FLOOR_LABEL, style.floor_handle())
            ax_sec.loglog(sub["n_keys"], sub[reference[mode][0]], color=style.method_color("exact"), marker=marker,
                          ls=ls, ms=4, zorder=style.Z_OURS)
        bad = at_mode.groupby("n_keys")["violations"].sum()
        bad = bad[bad > 0]
        if len(bad):  # a gap at or below 0 leaves a log axis: the units below an attained value are marked
            at_bottom = matplotlib.transforms.blended_transform_factory(ax_gap.transData, ax_gap.transAxes)
            (h,) = ax_gap.plot(bad.index, [0.04] * len(bad), "x", color="red", ms=9, mew=2, transform=at_bottom)
            for n, k in bad.items():
                ax_gap.annotate(f"{int(k)}", (n, 0.04), xycoords=at_bottom, xytext=(6, -3), textcoords="offset points",
                                fontsize=style.FONT["note"], color="red")
            extra.setdefault("units whose certificate lies below an attained value\n(soundness violation; count)", h)
        if mode == "fixed" and paper.get("rel_gap"):
            for r, val in sorted(paper["rel_gap"].items()):
                h = style.paper_marker(ax_gap, [5], [val], label=None, note=f"paper, r = {r:g}: {val:g}")
            extra.setdefault("paper (GPT-2 small): second order at 5 keys, fixed query", h)
        sec = (paper.get("seconds") or {}).get(mode)
        if sec is not None:
            (h,) = ax_sec.plot([2, 16], [sec, sec], "-", color=style.PAPER_COLOR, lw=2.5, zorder=style.Z_PAPER)
            extra.setdefault("paper (GPT-2 small): second order,\nmedian s per unit (≤ 16 keys)", h)
            ax_sec.annotate(f"paper {sec:g} s", (16, sec), xytext=(4, -3), textcoords="offset points",
                            fontsize=style.FONT["note"])
        ours = sorted(set(at_mode["n_keys"].astype(int)))
        for ax in (ax_gap, ax_sec):
            ticks = sorted(set(ours) | ({2, 16} if ax is ax_sec and sec is not None else set())
                           | ({5} if ax is ax_gap and mode == "fixed" and paper.get("rel_gap") else set()))
            ax.set_xlim(ticks[0] / 1.5, ticks[-1] * 1.5)
            ax.set_xticks(ticks)
            ax.set_xticklabels([str(t) for t in ticks])
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.axvspan(1, 16, color="0.85", alpha=0.5, lw=0, zorder=0)
            ax.set_xlabel("attended keys n")
        query = "fixed query (exact worst case known)" if mode == "fixed" else \
            "varying query (no exact value: gap to the best ascent value)"
        ax_gap.set_title(query)
        if mode != "fixed":
            style.no_paper_value(ax_gap, "the paper states no varying-query gap")
        ax_sec.set_title(f"{mode} query: seconds per unit")
        ax_gap.set_ylabel("median gap /\noutput movement range")
        ax_sec.set_ylabel("median seconds per unit")
    extra["shaded: the paper's range (at most 16 keys)"] = Patch(color="0.85", alpha=0.5, lw=0)
    colours = {style.method_label(c): Line2D([], [], color=style.method_color(c), lw=2.2) for c in CERTS}
    colours["reference: exact worst case (fixed) /\nbest ascent (varying)"] = Line2D(
        [], [], color=style.method_color("exact"), lw=2.2)
    shapes = {f"r = {r:g}": Line2D([], [], color="black", marker=line_styles[r][0], ls=line_styles[r][1])
              for r in radii}
    for title, entries, loc in (("colour: method", colours, "outside lower left"),
                                ("marker and line: radius", shapes, "outside lower center"),
                                ("the paper and other marks", extra, "outside lower right")):
        fig.legend(list(entries.values()), list(entries.keys()), loc=loc, title=title, fontsize=style.FONT["legend"],
                   title_fontsize=style.FONT["legend"], alignment="left")
    fig.suptitle(f"Long context, {' and '.join(modes)} query{' (' + model_note + ')' if model_note else ''}\n"
                 f"{style.wrap(label)}")
    save_figure(fig, out_pdf)
    plt.close(fig)
