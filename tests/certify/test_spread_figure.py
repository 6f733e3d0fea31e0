"""The spread of the per-unit relative gap (seaborn box and strip plots): every unit is drawn, the boxes' whiskers
reach the smallest and largest unit, the paper's medians and bounds sit at the second-order boxes, and the figure is
written. seaborn, a declared dependency, is what draws it."""
import ast
import re

import matplotlib
import numpy as np
import pandas as pd
import seaborn
import yaml

from attncert.certify import figures as cfig
from attncert.certify import spread_figure as sfig
from attncert.figure_style import style
from attncert.paper_comparison.paper_comparison import claim_dicts
from conftest import REPO

matplotlib.use("Agg")
CLAIMS = claim_dicts(REPO / "data" / "paper_claims.yaml", "paper_a")
RADII = [0.0005, 0.001, 0.002, 0.01, 0.02]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def synthetic_table(units: int = 12, seed: int = 0) -> pd.DataFrame:
    """A certification table of `units` units per (mode, radius) with known gaps: movement 1 (nominal 0, reference
    1), relative gaps first order ~ 0.3, second order ~ 3 r, tight ~ r; one tight gap of exactly 0."""
    rng = np.random.default_rng(seed)
    rows = []
    for mode in ("fixed", "varying"):
        for r in RADII:
            for u in range(units):
                spread = np.exp(rng.normal(0, 0.5, 3))
                rows.append({"layer": 0, "head": u, "prompt": 0, "query_pos": 4, "norm": "linf", "mode": mode,
                             "radius": r, "nominal": 0.0, "exact_hi": 1.0 if mode == "fixed" else np.nan,
                             "exact_lo": 1.0 if mode == "fixed" else np.nan, "best_feasible": 1.0,
                             "first_order": 1 + 0.3 * spread[0], "second_order": 1 + 3 * r * spread[1],
                             "second_order_tight": 1 + r * spread[2]})
    df = pd.DataFrame(rows)
    df.loc[0, "second_order_tight"] = 1.0  # a gap of 0 and an infinite one: not on the log axis, counted in the title
    df.loc[1, "first_order"] = np.inf
    return df


def _capture(monkeypatch):
    figs = []
    monkeypatch.setattr(sfig, "save_figure", lambda fig, out: figs.append(fig))
    return figs


def test_the_figure_is_written_as_pdf_and_png(tmp_path):
    out = tmp_path / "relative_gap_spread.pdf"
    cfig.draw("relative_gap_spread", synthetic_table(), "synthetic", out, claims=CLAIMS)
    assert out.read_bytes().startswith(b"%PDF") and out.stat().st_size > 10_000
    png = out.with_suffix(".png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 30_000


def test_a_mode_without_a_positive_gap_is_said_so(monkeypatch):
    figs = _capture(monkeypatch)
    df = synthetic_table()
    varying = df["mode"] == "varying"
    df.loc[varying, ["first_order", "second_order", "second_order_tight"]] = 1.0  # every varying gap is 0
    sfig.figure_gap_spread(df, "synthetic", "unused.pdf", claims=CLAIMS)
    title = f"varying query: no unit with a positive finite gap ({3 * varying.sum()} units)"
    assert figs[0].axes[1].get_title() == title
    assert figs[0].legends and "first order" in [t.get_text() for t in figs[0].legends[0].get_texts()]


def test_seaborn_draws_every_unit_and_whiskers_span_them(monkeypatch):
    calls = []
    for name in ("boxplot", "stripplot"):
        real = getattr(seaborn, name)
        monkeypatch.setattr(sfig.sns, name, lambda *a, _real=real, _name=name, **kw: (calls.append(_name),
                                                                                      _real(*a, **kw))[1])
    figs = _capture(monkeypatch)
    df = synthetic_table()
    sfig.figure_gap_spread(df, "synthetic", "unused.pdf", claims=CLAIMS)
    assert calls.count("boxplot") == 2 and calls.count("stripplot") == 2  # one of each per query mode
    data = sfig.long_table(df)
    for ax, mode in zip(figs[0].axes, ("fixed", "varying")):
        shown = data[(data["mode"] == mode) & (data["rel_gap"] > 0) & np.isfinite(data["rel_gap"])]
        dots = sum(len(c.get_offsets()) for c in ax.collections if c.get_zorder() == style.Z_OURS)
        assert dots == len(shown), (mode, dots, len(shown))  # every unit with a positive gap is a dot
        whiskers = np.concatenate([line.get_ydata() for line in ax.lines if len(line.get_ydata()) == 2])
        assert np.isclose(whiskers.min(), shown["rel_gap"].min()) and np.isclose(whiskers.max(),
                                                                                 shown["rel_gap"].max())
    assert "(2 with a gap ≤ 0 or not finite, not drawn" in figs[0].axes[0].get_title()
    assert "not drawn" not in figs[0].axes[1].get_title()
    assert figs[0].get_suptitle().startswith("Spread of the per-unit relative gap — synthetic: 1 layer × 12 heads")


def test_the_papers_medians_and_bounds_sit_at_the_second_order_boxes(monkeypatch):
    figs = _capture(monkeypatch)
    sfig.figure_gap_spread(synthetic_table(), "synthetic", "unused.pdf", claims=CLAIMS)
    fixed, varying = figs[0].axes
    marks = sorted(tuple(np.round(xy, 6)) for c in fixed.collections if c.get_zorder() == style.Z_PAPER
                   for xy in c.get_offsets())
    x = {r: i for i, r in enumerate(RADII)}  # the second order is the middle one of three boxes: no offset
    claim = {c["id"]: c["value"] for c in CLAIMS}
    assert marks == sorted([(x[0.0005], 0.1), (x[0.001], 0.1), (x[0.002], 0.1), (x[0.001], 0.01),
                            (x[0.002], claim["second_order_rel_gap_r0.002"]),
                            (x[0.02], claim["second_order_rel_gap_r0.02"])])
    assert not [c for c in varying.collections if c.get_zorder() == style.Z_PAPER]
    assert "no paper value" in varying.get_title()
    labels = [t.get_text() for t in figs[0].legends[0].get_texts()]
    assert "paper (GPT-2 small): every unit ≤ 0.1 at r ≤ 0.002 (a bound, not a value)" in labels
    assert "paper (GPT-2 small): median ≤ 0.01 at r = 0.001 (a bound, not a value)" in labels


def test_paper_bounds_read_the_shares_as_bounds_on_the_spread():
    assert sfig.paper_bounds(CLAIMS, RADII) == [([0.0005, 0.001, 0.002], 0.1, "every unit"), ([0.001], 0.01, "median")]
    assert sfig.paper_bounds([], RADII) == []


def _imports(path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def test_seaborn_is_declared_because_a_module_draws_with_it():
    users = [p.relative_to(REPO).as_posix() for p in (REPO / "src").rglob("*.py") if "seaborn" in _imports(p)]
    assert "src/attncert/certify/spread_figure.py" in users
    declared = tomllib_dependencies()
    assert "seaborn" in declared
    env = yaml.safe_load((REPO / "environment.yml").read_text())["dependencies"]
    assert any(isinstance(d, str) and re.match(r"seaborn\b", d) for d in env)


def tomllib_dependencies() -> set[str]:
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in deps}
