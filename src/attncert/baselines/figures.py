"""The baseline figure, one column per query mode, titled with the model and grid.

Top row: median relative gap vs radius of every method beside the second-order certificate. Bottom row:
the median per-unit ratio gap / certificate gap of the paper's CROWN and α-CROWN (`comparison`'s
`ratio_to_certificate`, the quantity the paper's ratios and our verdicts use), with the paper's ratios
from `data/paper_claims.yaml` drawn as labelled markers at their radii (a ratio claimed "at every radius"
as a bar at each plotted radius). Legends sit below the axes. A median of the certificate's gap, or of a ratio
to it, with at least half of its units' certificate gaps below the solver noise floor is drawn hollow: it is not a
result (`reporting.noise_floor`).
"""
from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from attncert.baselines.comparison import KEYS, PAPER_ALPHA_METHOD, PAPER_CROWN_METHOD  # noqa: E402
from attncert.figure_style import style  # noqa: E402
from attncert.reporting.report_files import save_figure  # noqa: E402
from attncert.reporting.noise_floor import at_floor_count  # noqa: E402

#: the methods of the ratio row, and the claim-id prefix of the paper's ratio for each
RATIO_METHODS = {PAPER_CROWN_METHOD: (style.method_name(PAPER_CROWN_METHOD), "crown_over_cert_"),
                 PAPER_ALPHA_METHOD: (style.method_name(PAPER_ALPHA_METHOD), "alpha_crown_over_cert_")}
RATIO_COLORS = {m: style.method_color(m) for m in RATIO_METHODS}
TIGHT = "second_order_tight"
#: the methods whose numbers the paper reports (drawn bold); the others are variants (thin, open markers)
PAPER_METHODS = ("ibp", PAPER_CROWN_METHOD, PAPER_ALPHA_METHOD)
#: drawing order and marker of every method of the top row (unknown methods follow, marker "o")
ORDER = {"ibp": "P", "crown": "o", "crown_mid": "v", "crown_lirpa_softmax": "^", "alpha_crown": "s",
         "alpha_crown_last_layer": "<", "alpha_crown_last_layer_lirpa_softmax": "D", "second_order": "o",
         TIGHT: "o"}


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


def _legend_below(ax, ncol: int = 2, **kw) -> None:
    style.legend_below(ax, ncol=ncol, **kw)


def _dodge(method: str) -> float:
    """A small multiplicative x-offset per method so that coinciding medians stay visible side by side."""
    k = list(ORDER).index(method) if method in ORDER else len(ORDER)
    return 1.0 + 0.025 * (k - (len(ORDER) - 1) / 2)


def _method_style(method: str) -> dict:
    if method in ("second_order", TIGHT):
        return dict(color=style.method_color(method), lw=2.8, marker="o", ms=6, zorder=4,
                    ls="-" if method == "second_order" else "--")
    paper = method in PAPER_METHODS
    return dict(color=style.method_color(method), lw=2.0 if paper else 1.1, marker=ORDER.get(method, "o"),
                ms=6 if paper else 5, mfc=None if paper else "white", ls="-" if paper else (0, (4, 2)),
                zorder=style.Z_OURS)


def _at_floor(flags: pd.Series, radius: pd.Series) -> pd.Series:
    """Per radius: at least half of the units' certificate gaps below the noise floor."""
    return flags.astype(bool).groupby(radius).agg(lambda f: at_floor_count(f.sum(), len(f)))


def figure_gap_vs_radius(m: pd.DataFrame, label: str, out_pdf, claims=()) -> None:
    """m: `comparison.merge` of the baseline and certification tables; claims: Paper A's (`claim_dicts`)."""
    ok = m[(m["status"] == "ok") & (m["gap"] > 0)]
    units = m.drop_duplicates(KEYS)
    cert = units.assign(method="second_order", gap=lambda d: d["gap_second_order"],
                        rel_gap=lambda d: d["gap_second_order"] / d["movement"])
    parts = [ok, cert[cert["gap"] > 0]]
    floors = {("second_order", mode): _at_floor(g["below_floor_second_order"], g["radius"])
              for mode, g in units.groupby("mode")}
    if "gap_second_order_tight" in m:
        tight = units.assign(method=TIGHT, gap=lambda d: d["gap_second_order_tight"],
                             rel_gap=lambda d: d["gap_second_order_tight"] / d["movement"])
        parts.append(tight[tight["gap"] > 0])
        floors.update({(TIGHT, mode): _at_floor(g["below_floor_second_order_tight"], g["radius"])
                       for mode, g in units.groupby("mode")})
    allm = pd.concat(parts, ignore_index=True)
    floored = False
    style.use()
    modes = sorted(allm["mode"].unique())
    fig = plt.figure(figsize=(5.2 * len(modes), 7.8))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.1, 1])
    axes = [top.subplots(1, len(modes), squeeze=False, sharey=True)[0],
            bottom.subplots(1, len(modes), squeeze=False, sharey=True)[0]]
    methods = sorted(allm["method"].unique(), key=lambda m: (list(ORDER).index(m) if m in ORDER else 99, m))
    for col, mode in enumerate(modes):
        ax = axes[0][col]
        at_mode = allm[allm["mode"] == mode]
        for method in methods:
            g = at_mode[at_mode["method"] == method]
            if g.empty:
                continue
            q = g.groupby("radius")["rel_gap"].median()
            ax.plot(q.index * _dodge(method), q.values, label=style.method_label(method), **_method_style(method))
            if (method, mode) in floors:
                at = floors[(method, mode)].reindex(q.index, fill_value=False)
                floored |= style.floor_points(ax, q.index * _dodge(method), q.values, at,
                                              style.method_color(method)) is not None
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius r (markers offset slightly per method)", fontsize=style.FONT["tick"])
        ax.set_title(f"{mode} query: median relative gap")

    handles, labels = axes[0][0].get_legend_handles_labels()  # the same methods in both columns: one legend
    if floored:
        handles, labels = handles + [style.floor_handle()], labels + [style.FLOOR_LABEL]
    style.figure_legend(top, handles, labels, ncol=3)
    for col, mode in enumerate(modes):
        ax = axes[1][col]
        sub = ok[ok["mode"] == mode]
        radii = sorted(set(sub["radius"]))
        hollow = False
        for method, (name, prefix) in RATIO_METHODS.items():
            g = sub[sub["method"] == method]
            if g.empty:
                continue
            q = g.groupby("radius")["ratio_to_certificate"].median()
            ax.plot(q.index, q.values, "o-", color=RATIO_COLORS[method], label=f"ours: {name} / certificate",
                    zorder=style.Z_OURS)
            at = _at_floor(g["below_floor_second_order"], g["radius"]).reindex(q.index, fill_value=False)
            hollow |= style.floor_points(ax, q.index, q.values, at, RATIO_COLORS[method]) is not None
            claimed = paper_ratios(claims, prefix, mode, radii)
            for at, lo, hi in (c for c in claimed if c[2] > c[1]):  # a range claimed at every radius: a band
                style.paper_range(ax, min(at) / 1.1, max(at) * 1.1, lo, hi, color=RATIO_COLORS[method],
                                  label=f"paper (GPT-2 small): {name} {lo:g}–{hi:g}× at every radius")
            points = sorted((c[0][0], c[1]) for c in claimed if c[2] == c[1])  # one value at one radius
            if points:
                style.paper_marker(ax, [r for r, _ in points], [v for _, v in points], scatter=True,
                                   color=RATIO_COLORS[method], label=f"paper (GPT-2 small): {name}\n    "
                                   + ", ".join(f"{v:g}× at r = {r:g}" for r, v in points))
        if hollow:
            ax.plot([], [], ls="none", marker="o", mfc="white", mec="0.3", mew=1.5,
                    label="hollow: the certificate's gap at the solver noise floor (ratio not a result)")
        ax.axhline(1.0, color="grey", lw=1, ls=":", label="ratio 1 (as tight as the certificate)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("radius r")
        ax.set_title(f"{mode} query: gap / certificate's gap (median per unit)")
        _legend_below(ax, ncol=1, offset=0.28)
    axes[0][0].set_ylabel("median relative gap\n(bound − reference) / movement")
    axes[1][0].set_ylabel("gap / second-order (paper-like)\ncertificate's gap")
    fig.suptitle(f"IBP / CROWN / α-CROWN vs the second-order certificate\n{label}")
    save_figure(fig, out_pdf)
