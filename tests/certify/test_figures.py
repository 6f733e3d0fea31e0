"""The figures that compare with the paper: the paper's numbers (read from data/paper_claims.yaml) are drawn
as labelled markers at their radii, and every legend lies outside the axes, so it covers no data."""
import dataclasses

import matplotlib
import numpy as np
import pandas as pd
import pytest

from attncert.baselines import figures as bfig
from attncert.baselines.comparison import PAPER_ALPHA_METHOD, PAPER_CROWN_METHOD, merge
from attncert.baselines.linear_bound_baselines import baseline_upper_bounds
from attncert.certify import figures as cfig
from attncert.certify.run import certify_unit
from attncert.head.problem import random_head_problem
from attncert.paper_comparison.paper_comparison import claim_dicts
from conftest import REPO

matplotlib.use("Agg")
CLAIMS = claim_dicts(REPO / "data" / "paper_claims.yaml", "paper_a")
RADII = [0.001, 0.002, 0.01, 0.02]


def _claim(cid):
    return next(c["value"] for c in CLAIMS if c["id"] == cid)


@pytest.fixture(scope="module")
def units():
    """Real certification and baseline rows of random small heads (2 heads x 4 radii x 2 modes)."""
    cert, base = [], []
    for h in range(2):
        for mode in ("fixed", "varying"):
            problems = [dataclasses.replace(random_head_problem(np.random.default_rng(h), n=5, radius=r, mode=mode,
                                                                scale=0.5),
                                            meta=dict(layer=0, head=h, prompt=0, query_pos=4)) for r in RADII]
            cert += [certify_unit(p, ascent_restarts=2, ascent_steps=20) for p in problems]
            for method in (PAPER_CROWN_METHOD, PAPER_ALPHA_METHOD):
                for p, res in zip(problems, baseline_upper_bounds(problems, method, alpha_iterations=3)):
                    base.append({**p.meta, "radius": p.radius, "norm": p.norm, "mode": p.mode, "method": method,
                                 "upper": res.upper, "status": res.status})
    return pd.DataFrame(cert), pd.DataFrame(base)


def _capture(monkeypatch, module):
    figs = []
    monkeypatch.setattr(module, "save_figure", lambda fig, out: figs.append(fig))
    return figs


def _legends_outside(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box, frame = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.y1 <= frame.y0 or box.x0 >= frame.x1, f"the legend of '{ax.get_title()}' overlaps its axes"


def _labels(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_paper_points_come_from_the_claims_file():
    assert cfig.paper_points(CLAIMS, "second_order_rel_gap_r") == [
        (0.002, _claim("second_order_rel_gap_r0.002")), (0.02, _claim("second_order_rel_gap_r0.02"))]
    assert cfig.paper_points([], "second_order_rel_gap_r") == []
    lo, hi = _claim("crown_over_cert_fixed")
    assert bfig.paper_ratios(CLAIMS, "crown_over_cert_", "fixed", RADII) == [(RADII, lo, hi)]
    assert sorted(bfig.paper_ratios(CLAIMS, "alpha_crown_over_cert_", "varying", RADII)) == [
        ([0.001], _claim("alpha_crown_over_cert_varying_r0.001"), _claim("alpha_crown_over_cert_varying_r0.001")),
        ([0.01], _claim("alpha_crown_over_cert_varying_r0.01"), _claim("alpha_crown_over_cert_varying_r0.01"))]


def test_relative_gap_figure_marks_the_papers_values(units, monkeypatch):
    figs = _capture(monkeypatch, cfig)
    cfig.figure_relative_gap(units[0], "random heads", "unused.pdf", claims=CLAIMS)
    fixed = figs[0].axes[0]
    offsets = [tuple(np.round(c.get_offsets()[i], 6)) for c in fixed.collections if "paper" in str(c.get_label())
               for i in range(len(c.get_offsets()))]
    assert offsets == [(0.002, _claim("second_order_rel_gap_r0.002")), (0.02, _claim("second_order_rel_gap_r0.02"))]
    assert any("paper, second order" in t for t in _labels(fixed))
    assert not any("paper, " in t for t in _labels(figs[0].axes[1]))  # the paper's gaps are fixed-query numbers
    _legends_outside(figs[0])


def test_certified_within_and_secant_figures_mark_the_papers_values(units, monkeypatch):
    figs = _capture(monkeypatch, cfig)
    cfig.figure_certified_within(units[0], "random heads", "unused.pdf", claims=CLAIMS)
    cfig.figure_gap_over_secant(units[0], "random heads", "unused.pdf", claims=CLAIMS)
    within, secant = figs
    assert sum("paper (GPT-2 small)" in t for t in _labels(within.axes[0])) == 2
    assert any(f"({_claim('gap_over_secant_max'):g}, GPT-2 small)" in t for t in _labels(secant.axes[0]))
    _legends_outside(within)
    _legends_outside(secant)


def test_baselines_figure_marks_the_papers_ratios(units, monkeypatch):
    cert, base = units
    figs = _capture(monkeypatch, bfig)
    bfig.figure_gap_vs_radius(merge(base, cert), "random heads", "unused.pdf", claims=CLAIMS)
    fig = figs[0]
    fixed_ratio, varying_ratio = fig.axes[2], fig.axes[3]
    assert "gap / certificate" in fixed_ratio.get_title() and fixed_ratio.get_title().startswith("fixed")
    assert any("CROWN 3.8–4.7× at every radius" in t for t in _labels(fixed_ratio))
    stars = [tuple(np.round(xy, 6)) for c in varying_ratio.collections if "paper" in str(c.get_label())
             for xy in c.get_offsets()]
    assert sorted(stars) == sorted([(0.001, _claim("crown_over_cert_varying_r0.001")),
                                    (0.01, float(_claim("crown_over_cert_varying_r0.01"))),
                                    (0.001, _claim("alpha_crown_over_cert_varying_r0.001")),
                                    (0.01, _claim("alpha_crown_over_cert_varying_r0.01"))])
    _legends_outside(fig)


def _hollow(ax) -> list:
    """The points an axes draws hollow (white face): the values at the solver noise floor."""
    return [xy for line in ax.get_lines() if line.get_markerfacecolor() == "white" and line.get_linestyle() == "None"
            for xy in line.get_xydata()]


def test_gaps_at_the_noise_floor_get_hollow_markers_and_no_slope(units, monkeypatch):
    """On these small heads the tight certificate is exact for a fixed query up to ~1e-11 (gaps that fall as r grows,
    below the solver noise floor): its medians are hollow and its slope is not given, while the paper-like second
    order keeps its slope and filled markers, and the varying query has nothing hollow. Planting the second order's
    gaps below the floor too makes them hollow and slope-less; its secant ratios are then drawn apart and the title's
    largest ratio ignores them."""
    cert, _ = units
    radii = cert["radius"].nunique()
    figs = _capture(monkeypatch, cfig)
    cfig.figure_relative_gap(cert, "random heads", "unused.pdf", claims=CLAIMS)
    fixed, varying = figs[0].axes
    labels = _labels(fixed)
    tight = next(t for t in labels if t.startswith("second order (tight"))
    assert tight.endswith("no gap slope (gaps at the noise floor)")
    assert next(t for t in labels if t.startswith("second order (paper")).split("gap slope ")[1][0].isdigit()
    assert len(_hollow(fixed)) == radii and not _hollow(varying)
    assert any("solver noise floor" in t for t in labels)

    ref = cert["exact_hi"].where(cert["mode"].eq("fixed"), cert["best_feasible"])
    tiny = 1e-12 * (cert["first_order"] - cert["nominal"])
    floored = cert.assign(second_order=ref + tiny, secant_bound=tiny / 5)
    floored.loc[floored.index[0], ["second_order", "secant_bound"]] = cert.loc[cert.index[0], "second_order"], 1.0
    cfig.figure_relative_gap(floored, "random heads", "unused.pdf", claims=CLAIMS)
    fixed = figs[-1].axes[0]
    assert next(t for t in _labels(fixed) if t.startswith("second order (paper")).endswith("(gaps at the noise floor)")
    assert len(_hollow(fixed)) == 2 * radii
    cfig.figure_gap_over_secant(floored, "random heads", "unused.pdf", claims=CLAIMS)
    secant = figs[-1].axes[0]
    assert "at the noise floor" in secant.get_title() and "max ratio 5" not in secant.get_title()
    assert any("ratio not meaningful" in t for t in _labels(secant))
    _legends_outside(figs[0])
