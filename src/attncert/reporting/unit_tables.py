"""Unit tables shared by every stage that bounds a head: reference values, gaps, slopes, soundness.

A unit is one (layer, head, prompt, query position, norm, mode, radius); the certification stage
writes one row per unit, the baseline stage one row per unit and method.

For one unit (fixed radius r) with nominal value g0, reference value g* (the exact worst case
`exact_hi` for a fixed query, the best feasible value found by ascent for a varying query) and a
certificate U >= g*:

    movement range   m(r) = g* - g0                  (how far the output can move)
    gap              G(r) = U - g*                   (how loose the certificate is)
    relative gap     G(r) / m(r)

Per-unit slope: least-squares slope of log G(r) against log r over the radii <= `slope_max_radius`
(larger radii saturate the scores and leave the asymptotic regime); units with fewer than two
positive gaps in that range get no slope.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

UNIT_KEYS = ["layer", "head", "prompt", "query_pos", "norm", "mode"]
# relative tolerance used to call a certificate "below" the reference value (float noise)
SOUNDNESS_RTOL = 1e-9


def reference_value(df: pd.DataFrame) -> pd.Series:
    """Exact worst case where it exists (fixed query), else the best feasible value found."""
    ref = df["exact_hi"].where(df["mode"].eq("fixed") & df["exact_hi"].notna(), df["best_feasible"])
    return ref.astype(float)


def attained_value(df: pd.DataFrame) -> pd.Series:
    """The largest value actually attained on the unit: the exact witness or the best ascent value."""
    return df[["exact_lo", "best_feasible"]].max(axis=1, skipna=True)


def add_gaps(df: pd.DataFrame, certificates=("first_order", "second_order", "second_order_tight")) -> pd.DataFrame:
    """Add movement, gap_<cert> and rel_gap_<cert> columns (a copy)."""
    out = df.copy()
    out["reference"] = reference_value(out)
    out["movement"] = out["reference"] - out["nominal"]
    for cert in certificates:
        if cert in out:
            out[f"gap_{cert}"] = out[cert] - out["reference"]
            out[f"rel_gap_{cert}"] = out[f"gap_{cert}"] / out["movement"]
    return out


def soundness_violations(df: pd.DataFrame,
                         certificates=("first_order", "second_order", "second_order_tight")) -> pd.DataFrame:
    """Rows where a certificate (or the exact bracket) lies below a value that is actually attained.

    Attained values: the best feasible value found by ascent, and `exact_lo` (the value of an
    explicit feasible witness). A sound upper bound must be >= both.
    """
    rows = []
    attained = attained_value(df)
    scale = np.maximum(1.0, np.abs(attained))
    for cert in [c for c in ("exact_hi", *certificates) if c in df]:
        bad = df[cert].notna() & attained.notna() & (df[cert] < attained - SOUNDNESS_RTOL * scale)
        for idx in df.index[bad]:
            rows.append({**{k: df.at[idx, k] for k in UNIT_KEYS + ["radius"]}, "quantity": cert,
                         "value": df.at[idx, cert], "attained": attained[idx],
                         "shortfall": attained[idx] - df.at[idx, cert]})
    return pd.DataFrame(rows, columns=UNIT_KEYS + ["radius", "quantity", "value", "attained", "shortfall"])


def below_attained(upper: float, attained: float, rtol: float = SOUNDNESS_RTOL) -> bool:
    """True when an upper bound lies below an attained value by more than float noise."""
    return math.isfinite(upper) and math.isfinite(attained) and upper < attained - rtol * max(1.0, abs(attained))


def soundness_check(row: dict, bounds=("exact_hi", "first_order", "second_order")) -> list[str]:
    """Every upper bound of one row must be >= every value actually attained (ascent, the exact witness)."""
    attained = [v for v in (row["best_feasible"], row["exact_lo"]) if math.isfinite(v)]
    if not attained:
        return []
    best = max(attained)
    return [f"{name} {row[name]!r} < attained {best!r}" for name in bounds if below_attained(row[name], best)]


def loglog_slope(radii: np.ndarray, values: np.ndarray) -> float:
    ok = np.isfinite(values) & (values > 0)
    if ok.sum() < 2:
        return np.nan
    x, y = np.log(radii[ok]), np.log(values[ok])
    return float(np.polyfit(x, y, 1)[0])


def per_unit_slopes(df: pd.DataFrame, column: str, slope_max_radius: float = 0.005) -> pd.Series:
    """Slope of log(column) vs log(radius) per unit, over radius <= slope_max_radius."""
    sub = df[df["radius"] <= slope_max_radius + 1e-15]
    return sub.groupby(UNIT_KEYS).apply(
        lambda g: loglog_slope(g["radius"].to_numpy(float), g[column].to_numpy(float)), include_groups=False)


def share_within(df: pd.DataFrame, cert: str, fraction: float) -> pd.Series:
    """Per radius, share of units whose gap is within `fraction` of the movement range."""
    rel = df[f"rel_gap_{cert}"]
    return (rel <= fraction).groupby(df["radius"]).mean()
