"""One figure style for every stage: method names as readers know them, one colour per method, figure and
font sizes, legends outside the data, and the paper's own values drawn beside ours.

Every stage's figure module (certify, baselines, block, minip, and certify.long_context_figure) calls `use()` before
drawing, names methods with `method_label` and colours them with `method_color`, and draws the paper's
values with `paper_marker` (a number at a point, or a one-sided bound such as "> 0.5") and `paper_range`
(a range): always in black, with a distinct open marker, labelled "paper", and drawn *under* our series
(`Z_PAPER` < `Z_OURS`), so our points stay visible where the two coincide. A one-sided bound is drawn as a
bar with an arrow towards the side it allows, never as a measured point.

Imports matplotlib only: nothing from the stage packages (they import this module).
"""
from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import transforms  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

#: code name (tables, config) -> the name readers know
METHOD_NAMES = {
    "ibp": "IBP",
    "crown": "CROWN",
    "crown_mid": "CROWN (mid plane)",
    "crown_lirpa_softmax": "CROWN (auto_LiRPA softmax)",
    "alpha_crown": "α-CROWN",
    "alpha_crown_last_layer": "α-CROWN (last layer)",
    "alpha_crown_last_layer_lirpa_softmax": "α-CROWN (last layer, auto_LiRPA softmax)",
    "first_order": "first order",
    "second_order": "second order (paper-like)",
    "second_order_tight": "second order (tight)",
    "exact": "exact",
    "ascent": "best ascent",
    "per_op": "per-operation sum",
    "certificate": "block certificate",
    "kernel": "kernel attention",
    "dense": "dense softmax",
}
#: methods that go beyond the paper (said so in their legend label)
BEYOND_PAPER = {"second_order_tight", "certificate"}
#: one colour per method (colour-blind safe: Okabe-Ito and Dark2 hues)
METHOD_COLORS = {
    "ibp": "#cc79a7",
    "crown": "#d62728",
    "crown_mid": "#8c564b",
    "crown_lirpa_softmax": "#ff9896",
    "alpha_crown": "#0072b2",
    "alpha_crown_last_layer": "#56b4e9",
    "alpha_crown_last_layer_lirpa_softmax": "#1f4e9c",
    "first_order": "#d95f02",
    "second_order": "#1b9e77",
    "second_order_tight": "#7570b3",
    "exact": "#555555",
    "ascent": "#555555",
    "per_op": "#7f7f7f",
    "certificate": "#e69f00",
    "kernel": "#0072b2",
    "dense": "#009e73",
}
PAPER_COLOR = "black"
Z_PAPER = 1.5   # the paper's marks: under our series
Z_OURS = 3.0    # our series (lines default to 2, scatter collections to 1: set Z_OURS where a paper mark is near)

DPI = 150
#: the largest figure: ≈ 1600 × 1000 px at `DPI` (bbox_inches="tight" trims the margins)
MAX_WIDTH, MAX_HEIGHT = 10.6, 6.6
FONT = {"title": 10, "suptitle": 10.5, "label": 9.5, "tick": 8.5, "legend": 8, "note": 8}


def use() -> None:
    """The shared rc settings (white grid, font sizes); call before creating a figure."""
    plt.rcdefaults()
    matplotlib.use("Agg")
    plt.rcParams.update({
        "figure.dpi": 100, "savefig.dpi": DPI, "font.size": FONT["label"], "axes.titlesize": FONT["title"],
        "axes.labelsize": FONT["label"], "xtick.labelsize": FONT["tick"], "ytick.labelsize": FONT["tick"],
        "legend.fontsize": FONT["legend"], "figure.titlesize": FONT["suptitle"], "axes.grid": True,
        "grid.alpha": 0.35, "grid.linewidth": 0.6, "axes.edgecolor": "#444444", "axes.spines.top": False,
        "axes.spines.right": False, "legend.frameon": False, "lines.markersize": 5, "lines.linewidth": 1.6,
        "figure.constrained_layout.use": True})


def figsize(ncols: int = 1, nrows: int = 1, panel_w: float = 4.6, panel_h: float = 3.2, extra_h: float = 0.9):
    """(width, height) in inches for a grid of panels plus `extra_h` for titles and legends, capped so the
    PNG stays within about 1600 × 1000 px."""
    return min(ncols * panel_w, MAX_WIDTH), min(nrows * panel_h + extra_h, MAX_HEIGHT)


def wrap(text: str, width: int = 110) -> str:
    """A long title (a grid label) broken into lines of at most `width` characters, keeping every word."""
    return "\n".join(textwrap.fill(line, width, break_long_words=False) for line in text.split("\n"))


def method_name(code: str) -> str:
    """The reader's name of a method code (`crown_mid` -> "CROWN (mid plane)"); unknown codes unchanged."""
    return METHOD_NAMES.get(code, code)


def method_label(code: str) -> str:
    """The legend label: the reader's name, and "beyond the paper" where the method is ours only."""
    name = method_name(code)
    if code in BEYOND_PAPER:
        return name[:-1] + ", beyond the paper)" if name.endswith(")") else name + " (beyond the paper)"
    return name


def method_color(code: str, default: str = "#333333") -> str:
    return METHOD_COLORS.get(code, default)


def legend_below(ax, ncol: int = 1, handles=None, labels=None, offset: float | None = None, **kw):
    """The legend under the axes (below its tick labels and axis label), where it covers no data; offset: in
    axes heights (default: about 0.6 inch below the axes)."""
    if offset is None:
        offset = 0.62 / max(ax.get_position().height * ax.get_figure(root=True).get_figheight(), 0.5)
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    return ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -offset), ncol=ncol,
                     fontsize=FONT["legend"], frameon=False, **kw)


def figure_legend(fig, handles, labels, ncol: int = 3, **kw):
    """One legend under all panels of a (sub)figure, each entry once (constrained layout makes room)."""
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    kw = {"loc": "outside lower center", **kw}
    return fig.legend(list(seen.values()), list(seen.keys()), ncol=ncol, fontsize=FONT["legend"], frameon=False,
                      **kw)


def paper_handle(bound: str | None = None, range_: bool = False, color: str = PAPER_COLOR) -> Line2D:
    """A legend proxy of the paper's mark: an open diamond; an arrow for a one-sided bound; a bar for a range."""
    if bound:
        marker = r"$\uparrow$" if bound in (">", "≥") else r"$\downarrow$"
        return Line2D([], [], color=color, marker=marker, ls="none", ms=10)
    if range_:
        return Line2D([], [], color=color, marker="_", ls="-", lw=2.2, ms=9, alpha=0.8)
    return Line2D([], [], color=color, marker="D", ls="none", ms=9, mfc="none", mew=1.5)


def paper_marker(ax, x, y, label: str | None = "paper", bound: str | None = None, note: str | None = None,
                 note_side: str = "right", scatter: bool = False, color: str = PAPER_COLOR, **kw):
    """The paper's value(s) at x, y beside ours: a large open black diamond under our series (zorder
    `Z_PAPER`), labelled "paper" (or `label`). `bound` ">" / "≥" / "<" / "≤": the paper gives only a one-sided
    bound, drawn as a bar with an arrow towards the allowed side (no marker: it is not a measured point).
    `note`: a short text beside each mark ("paper 7.8×"); note_side "right", "left", "above" or "below".
    scatter=True draws the points as a collection (ax.scatter) instead of a Line2D. color: the mark's edge
    (black; a method's colour where the paper gives values of several methods). Returns the artist."""
    xs, ys = (list(x), list(y)) if hasattr(x, "__len__") else ([x], [y])
    if bound:
        up = bound in (">", "≥")
        if scatter:
            artist = ax.scatter(xs, ys, marker="_", s=260, linewidths=2.4, color=color, zorder=Z_PAPER,
                                label=label, **kw)
        else:
            (artist,) = ax.plot(xs, ys, ls="none", marker="_", ms=16, mew=2.4, color=color, zorder=Z_PAPER,
                                label=label, **kw)
        for xi, yi in zip(xs, ys):
            tip = transforms.offset_copy(ax.transData, fig=ax.figure, y=22 if up else -22, units="points")
            ax.annotate("", xy=(xi, yi), xycoords=tip, xytext=(xi, yi), textcoords="data", zorder=Z_PAPER,
                        arrowprops=dict(arrowstyle="-|>", color=color, lw=1.6, shrinkA=0, shrinkB=0))
    elif scatter:
        artist = ax.scatter(xs, ys, marker="D", s=90, facecolors="white", edgecolors=color, linewidths=1.5,
                            zorder=Z_PAPER, label=label, **kw)
    else:
        (artist,) = ax.plot(xs, ys, ls="none", marker="D", ms=9, mfc="white", mec=color, mew=1.5,
                            zorder=Z_PAPER, label=label, **kw)
    if note:
        dx, dy, ha, va = {"right": (9, 0, "left", "center"), "left": (-9, 0, "right", "center"),
                          "above": (0, 9, "center", "bottom"), "below": (0, -9, "center", "top")}[note_side]
        for xi, yi in zip(xs, ys):
            text = note.format(x=xi, y=yi) if "{" in note else note
            ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(dx, dy), ha=ha, va=va,
                        fontsize=FONT["note"], color=color, zorder=Z_PAPER)
    return artist


def paper_bound_line(ax, x0, x1, y, bound: str, label: str | None = "paper", color: str = PAPER_COLOR,
                     arrows: int = 2):
    """A one-sided bound the paper states over an x-interval ("> 0.8 for r < 8"): a dashed line (ax.hlines)
    with `arrows` arrows towards the allowed side (spaced evenly on a log x axis when the axis is log)."""
    artist = ax.hlines(y, x0, x1, color=color, lw=2.2, ls="--", zorder=Z_PAPER, label=label)
    log = ax.get_xscale() == "log"
    for t in [(k + 1) / (arrows + 1) for k in range(arrows)]:
        x = x0 * (x1 / x0) ** t if log and x0 > 0 else x0 + (x1 - x0) * t
        tip = transforms.offset_copy(ax.transData, fig=ax.figure, y=18 if bound in (">", "≥") else -18,
                                     units="points")
        ax.annotate("", xy=(x, y), xycoords=tip, xytext=(x, y), textcoords="data", zorder=Z_PAPER,
                    arrowprops=dict(arrowstyle="-|>", color=color, lw=1.4, shrinkA=0, shrinkB=0))
    return artist


def paper_range(ax, x0, x1, lo, hi, label: str | None = "paper range", median=None, axis: str = "y",
                color: str = PAPER_COLOR, **kw):
    """The paper's range [lo, hi] over the x-interval [x0, x1] (axis "y"): an unfilled hatched box (so no
    histogram or line under it changes colour), its median as a dashed line; axis "x": the range on the x axis,
    drawn as a bracket along the top of the axes. Under our series. Returns the box artist."""
    if axis == "y":
        box = ax.fill_between([x0, x1], [lo, lo], [hi, hi], facecolor="none", edgecolor=color, hatch="///",
                              lw=0.8, alpha=0.45, zorder=Z_PAPER, label=label, **kw)
        if median is not None:
            ax.hlines(median, x0, x1, color=color, ls="--", lw=1.3, zorder=Z_PAPER, label="paper median")
        return box
    top = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    (box,) = ax.plot([lo, hi], [0.95, 0.95], color=color, lw=2.2, marker="|", ms=12, mew=2.2,
                     transform=top, zorder=Z_PAPER, label=label, clip_on=False, **kw)
    if median is not None:
        ax.plot([median], [0.95], marker="D", ms=8, mfc="white", mec=color, mew=1.5, transform=top,
                zorder=Z_PAPER + 0.1, ls="none", label="paper median", clip_on=False)
    return box


def no_paper_value(ax, reason: str = "") -> None:
    """Say in the panel (a line under its title; call after `set_title`) that the paper has no value for
    what it shows, and why."""
    title = ax.get_title()
    ax.set_title((title + "\n" if title else "") + "no paper value" + (f" ({reason})" if reason else ""))


def not_reached_marker(ax, x, top, color, label: str | None = None, **kw):
    """Runs that never reached a threshold: an open marker with an up-arrow at `top` (above every plotted
    value; the axis carries a "not reached" row there). Returns the marker artist."""
    (artist,) = ax.plot(x, [top] * len(x), ls="none", marker="^", ms=9, mfc="none", mec=color, mew=1.5,
                        label=label, zorder=Z_OURS, **kw)
    return artist


#: the legend entry of a value at the solver noise floor (docs/certificate.md §6.1)
FLOOR_LABEL = "hollow: at the solver noise floor (not a result)"


def floor_points(ax, x, y, at_floor, color, marker: str = "o", ms: float = 6, zorder: float = 6, **kw):
    """Redraw the points of a series whose value is at the solver noise floor as hollow markers (white face, the
    series' colour as edge), above every series; returns the artist, or None when no point is at the floor."""
    pts = [(xi, yi) for xi, yi, f in zip(x, y, at_floor) if f]
    if not pts:
        return None
    (artist,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], ls="none", marker=marker, ms=ms, mfc="white",
                        mec=color, mew=1.5, zorder=zorder, **kw)
    return artist


def floor_handle(color: str = "#333333", marker: str = "o") -> Line2D:
    """A legend proxy of `floor_points`."""
    return Line2D([], [], ls="none", marker=marker, ms=6, mfc="white", mec=color, mew=1.5)
