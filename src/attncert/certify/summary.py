"""Tables of the certification stage (Paper A): per radius, per-unit slopes, beside the paper, soundness.

Inputs: the concatenated per-layer unit tables `data/certify/{model}/layer{L}.csv`. Every table header
names the model and the grid, so embedded-model results are never read as GPT-2's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from attncert.reporting.table_files import grid_label, write_table
from attncert.reporting.unit_tables import add_gaps, per_unit_slopes, soundness_violations


def summary_table(df: pd.DataFrame, model: str, slope_max_radius: float = 0.005) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per mode and radius: medians of relative gaps, shares within 10%/1%, secant ratio, timings;
    and per mode the medians of the per-unit log-log slopes."""
    g = add_gaps(df)
    rows = []
    for (mode, r), sub in g.groupby(["mode", "radius"]):
        row = {
            "model": model,
            "mode": mode,
            "radius": r,
            "units": len(sub),
            "median_rel_gap_first": sub["rel_gap_first_order"].median(),
            "median_rel_gap_second": sub["rel_gap_second_order"].median(),
            "max_rel_gap_second": sub["rel_gap_second_order"].max(),
            "share_within_10pct": (sub["rel_gap_second_order"] <= 0.10).mean(),
            "share_within_1pct": (sub["rel_gap_second_order"] <= 0.01).mean(),
            "max_gap_over_secant": (sub["gap_second_order"] / sub["secant_bound"]).max() if mode == "fixed" else np.nan,
            "median_bracket_over_movement": ((sub["exact_hi"] - sub["exact_lo"]) / sub["movement"]).median()
            if mode == "fixed"
            else np.nan,
            "median_t_exact_s": sub["t_exact_s"].median(),
            "median_t_first_s": sub["t_first_s"].median(),
            "median_t_second_s": sub["t_second_s"].median(),
            **(
                {
                    "median_rel_gap_tight": sub["rel_gap_second_order_tight"].median(),
                    "median_t_second_tight_s": sub["t_second_tight_s"].median(),
                }
                if "rel_gap_second_order_tight" in sub
                else {}
            ),
            "status_not_ok": int((sub["status"] != "ok").sum()),
        }
        rows.append(row)
    table = pd.DataFrame(rows)
    slopes = []
    for mode, sub in g.groupby("mode"):
        slopes.append({"model": model, "mode": mode, "fit_radii": f"r ≤ {slope_max_radius}",
                       "slope_first": per_unit_slopes(sub, "gap_first_order", slope_max_radius).median(),
                       "slope_second": per_unit_slopes(sub, "gap_second_order", slope_max_radius).median(),
                       "slope_movement": per_unit_slopes(sub, "movement", slope_max_radius).median(),
                       **({"slope_tight": per_unit_slopes(sub, "gap_second_order_tight", slope_max_radius).median()}
                          if "gap_second_order_tight" in sub else {})})
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
        "certify_units": int(len(fixed)),  # one row per unit (layer, head, prompt, query position, radius, norm)
        "certify_units_pos4": int((fixed["query_pos"] == 4).sum()),
        "exact_bracket_width": float(width.max()),
        "exact_bracket_median_vs_movement": float(
            ((fixed["exact_hi"] - fixed["exact_lo"]) / fixed["movement"]).median()
        ),
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
        **tight_measurements(g, table, srow, at),
    }


def tight_measurements(g: pd.DataFrame, table: pd.DataFrame, srow: pd.DataFrame, at) -> dict:
    """The tight certificate (beyond the paper): medians at r = 0.002 / 0.02, slope, time, max gap / B."""
    if "rel_gap_second_order_tight" not in g:
        return {}
    fixed = g[g["mode"] == "fixed"]
    return {
        "second_order_tight_rel_gap_r0.002": at("fixed", 0.002, "median_rel_gap_tight"),
        "second_order_tight_rel_gap_r0.02": at("fixed", 0.02, "median_rel_gap_tight"),
        "second_order_tight_slope": float(srow.loc["fixed", "slope_tight"]) if "fixed" in srow.index else None,
        "second_order_tight_gap_over_secant_max": float(
            (fixed["gap_second_order_tight"] / fixed["secant_bound"]).max()
        ),
        "cert_tight_seconds_fixed": float(fixed["t_second_tight_s"].median()),
        "cert_tight_seconds_varying": float(g.loc[g["mode"] == "varying", "t_second_tight_s"].median()),
    }


#: The files of the certification stage's tables, by their key in the rule's outputs.
STAGE_TABLE_KEYS = ("table", "slopes", "paper", "violations")


def stage_tables(df: pd.DataFrame, model: str) -> tuple[str, dict[str, tuple[pd.DataFrame, str]], dict]:
    """(grid label, {output key: (table, Markdown title)} in STAGE_TABLE_KEYS order, measured values): every table
    of the stage from the concatenated unit tables; pure, so the audit recomputes them with this function."""
    label = grid_label(df, model)
    table, slopes = summary_table(df, model)
    viol = violations_table(df)
    tables = {
        "table": (table, f"Certification per radius — {label}. Every certified number of the rows is "
                         f"checked by the audit (`attncert audit`, audit.md beside this table)"),
        "slopes": (slopes, f"Per-unit log-log slopes (medians) — {label}"),
        "paper": (paper_comparison(table, slopes, df, model), f"Paper A (GPT-2 small) vs reproduced ({label})"),
        "violations": (viol, f"Soundness violations — {label} ({len(viol)} rows)"),
    }
    return label, tables, paper_measurements(df, table, slopes)


def write_stage_tables(df: pd.DataFrame, model: str, out) -> tuple[str, dict, int]:
    """Write the per-radius table, the slopes, the paper comparison and the soundness violations to
    `out.table`, `out.slopes`, `out.paper`, `out.violations`; returns (grid label, measured values,
    number of violations)."""
    label, tables, measured = stage_tables(df, model)
    for key in STAGE_TABLE_KEYS:
        frame, title = tables[key]
        write_table(frame, getattr(out, key), title)
    return label, measured, len(tables["violations"][0])
