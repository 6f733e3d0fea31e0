"""The shared figure style: readers' names and colours of the methods, the paper's marks drawn under our
series (and a one-sided bound never as a measured point), and the style module's place at the bottom of the
import graph."""
import ast

import matplotlib
import numpy as np
import pandas as pd

from attncert.baselines.linear_bound_baselines import METHODS
from attncert.certify.long_context_figure import figure as long_context_figure
from attncert.certify.long_context_summary import CERTS as LONG_CONTEXT_CERTS
from attncert.figure_style import style
from conftest import REPO

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def test_every_method_code_has_a_readers_name_and_its_own_colour():
    codes = list(METHODS) + ["first_order", "second_order", "second_order_tight"]
    names = [style.method_name(c) for c in codes]
    assert not set(names) & set(codes[1:]), names  # no code names in legends ("ibp" -> "IBP")
    assert all("_" not in n.replace("auto_LiRPA", "") for n in names), names
    assert len(set(names)) == len(names)
    assert style.method_name("alpha_crown_last_layer_lirpa_softmax") == "α-CROWN (last layer, auto_LiRPA softmax)"
    assert style.method_name("crown_mid") == "CROWN (mid plane)"
    assert style.method_name("second_order") == "second order (paper-like)"
    assert "beyond the paper" in style.method_label("second_order_tight")
    assert "beyond the paper" not in style.method_label("crown")
    assert len({style.method_color(c) for c in codes}) == len(codes)


def test_paper_marker_is_drawn_under_our_series():
    style.use()
    fig, ax = plt.subplots()
    (ours,) = ax.plot([1, 2], [1, 2], "o-", zorder=style.Z_OURS)
    mark = style.paper_marker(ax, 2, 2, label="paper")
    pts = style.paper_marker(ax, [1], [1], scatter=True, label="paper points")
    assert mark.get_zorder() < ours.get_zorder() and pts.get_zorder() < ours.get_zorder()
    assert mark.get_marker() == "D" and mark.get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))
    assert mark.get_label() == "paper"
    plt.close(fig)


def test_a_one_sided_paper_bound_is_an_arrow_not_a_point():
    style.use()
    fig, ax = plt.subplots()
    bar = style.paper_marker(ax, 0.001, 0.5, bound=">", label="paper: > 0.5")
    assert bar.get_marker() == "_"  # a bar, not a point marker
    arrows = [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]
    assert len(arrows) == 1
    fig.canvas.draw()
    tip = arrows[0].xycoords.transform(arrows[0].xy)  # the arrow head, in display coordinates
    start = ax.transData.transform(arrows[0].xyann)   # the bound itself
    assert tip[1] > start[1] and np.isclose(tip[0], start[0])  # pointing up: "more than"
    line = style.paper_bound_line(ax, 1, 8, 0.8, ">", label="paper: > 0.8 for r < 8")
    assert line.get_zorder() < style.Z_OURS and len(ax.texts) == 3
    plt.close(fig)


def test_style_imports_no_stage_package():
    for path in (REPO / "src" / "attncert" / "figure_style").glob("*.py"):
        tree = ast.parse(path.read_text())
        mods = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        mods += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in mods if m.startswith("attncert.") and not m.startswith("attncert.figure_style")]


def test_long_context_figure_has_separate_colour_and_line_style_legends(monkeypatch):
    rows = []
    for mode in ("fixed", "varying"):
        for r in (0.002, 0.02):
            for n in (16, 64):
                rows.append(dict(mode=mode, radius=r, n_keys=n, violations=0, exact_s=0.01, ascent_s=0.02,
                                 **{f"rel_gap_{c}": 0.01 * n * r for c in LONG_CONTEXT_CERTS},
                                 **{f"{c}_s": 0.1 for c in LONG_CONTEXT_CERTS}))
    figs = []
    monkeypatch.setattr("attncert.reporting.report_files.save_figure", lambda fig, out: figs.append(fig))
    long_context_figure(pd.DataFrame(rows), "synthetic", "unused.pdf",
                        {"rel_gap": {0.002: 0.004}, "seconds": {"fixed": 10.0}})
    titles = [lg.get_title().get_text() for lg in figs[0].legends]
    assert titles == ["colour: method", "marker and line: radius", "the paper and other marks"]
    colour_labels = [t.get_text() for t in figs[0].legends[0].get_texts()]
    assert style.method_label("second_order") in colour_labels and not any("r = " in t for t in colour_labels)
    paper = [ln for ln in figs[0].axes[0].get_lines() if ln.get_marker() == "D"]
    assert paper and all(ln.get_zorder() < style.Z_OURS for ln in paper)
    assert np.allclose(paper[0].get_xdata(), [5])
    plt.close(figs[0])
