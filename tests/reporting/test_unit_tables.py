"""Gaps, slopes and soundness on unit tables (shared by the certification and baseline stages)."""
import numpy as np
import pandas as pd

from attncert.reporting.unit_tables import (add_gaps, attained_value, loglog_slope, per_unit_slopes, reference_value,
                                           share_within, soundness_violations)


def _table():
    radii = [0.001, 0.002, 0.004]
    rows = []
    for mode in ("fixed", "varying"):
        for r in radii:
            move = 10 * r
            rows.append({"layer": 0, "head": 1, "prompt": 0, "query_pos": 4, "norm": "linf", "mode": mode,
                         "radius": r, "nominal": 1.0, "exact_lo": 1.0 + move if mode == "fixed" else np.nan,
                         "exact_hi": 1.0 + move if mode == "fixed" else np.nan, "best_feasible": 1.0 + 0.9 * move,
                         "first_order": 1.0 + move + 3 * r, "second_order": 1.0 + move + 50 * r * r})
    return pd.DataFrame(rows)


def test_reference_is_exact_for_fixed_and_ascent_for_varying():
    df = _table()
    ref = reference_value(df)
    assert np.allclose(ref[df["mode"] == "fixed"], df.loc[df["mode"] == "fixed", "exact_hi"])
    assert np.allclose(ref[df["mode"] == "varying"], df.loc[df["mode"] == "varying", "best_feasible"])
    assert np.allclose(attained_value(df), df[["exact_lo", "best_feasible"]].max(axis=1))


def test_gaps_and_slopes_recover_the_planted_orders():
    g = add_gaps(_table())
    fixed = g[g["mode"] == "fixed"]
    assert np.allclose(fixed["gap_second_order"], 50 * fixed["radius"] ** 2)
    assert np.allclose(fixed["rel_gap_first_order"], 0.3)
    slopes = per_unit_slopes(g, "gap_second_order", slope_max_radius=0.01)
    assert np.allclose(slopes.loc[(0, 1, 0, 4, "linf", "fixed")], 2.0)
    assert np.isclose(loglog_slope(np.array([1.0, 2.0]), np.array([3.0, 24.0])), 3.0)
    assert np.isnan(loglog_slope(np.array([1.0, 2.0]), np.array([0.0, 1.0])))  # one positive value: no slope
    within = share_within(g[g["mode"] == "fixed"], "second_order", 0.01)
    assert within.loc[0.001] == 1.0 and within.loc[0.004] == 0.0  # 50 r^2 / (10 r) = 5 r


def test_soundness_violations_lists_planted_rows_only():
    df = _table()
    assert soundness_violations(df).empty
    df.loc[2, "second_order"] = df.loc[2, "exact_lo"] - 1e-3
    v = soundness_violations(df)
    assert len(v) == 1 and v.iloc[0]["quantity"] == "second_order" and np.isclose(v.iloc[0]["shortfall"], 1e-3)
