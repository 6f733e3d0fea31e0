"""Tables of the certification stage (Paper A): per radius, per-unit slopes, beside the paper, soundness.

Inputs: the concatenated per-layer unit tables `data/certify/{model}/layer{L}.csv`. Every table header
names the model and the grid, so embedded-model results are never read as GPT-2's. Gaps below the solver noise
floor (`reporting.noise_floor`) are counted per row, and the Markdown twins mark every median, largest value
and slope computed from them (`table_markdown`; the wording of every column: `certify.table_legend`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from attncert.certify import table_legend
from attncert.reporting.table_files import grid_label, write_table
from attncert.reporting.table_legend import legend_table
from attncert.reporting.noise_floor import SOLVER_NOISE, at_floor_count, gaps_with_floor, slope_below_floor
from attncert.reporting.unit_tables import UNIT_KEYS, add_gaps, per_unit_slopes, soundness_violations

#: certificate -> the suffix of its columns in the per-radius and slope tables
CERTS = {"first_order": "first", "second_order": "second", "second_order_tight": "tight"}


def summary_table(df: pd.DataFrame, model: str, slope_max_radius: float = 0.005) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per mode and radius: medians of relative gaps, shares within 10%/1%, secant ratio, timings;
    and per mode the medians of the per-unit log-log slopes."""
    g = gaps_with_floor(df)
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
            **secant_above_floor(sub, mode),
            **{f"units_below_floor_{short}": int(sub[f"below_floor_{cert}"].sum())
               for cert, short in CERTS.items() if f"below_floor_{cert}" in sub},
        }
        rows.append(row)
    table = pd.DataFrame(rows)
    slopes = []
    for mode, sub in g.groupby("mode"):
        row = {"model": model, "mode": mode, "fit_radii": f"r ≤ {slope_max_radius}",
               "units": int(sub.groupby(UNIT_KEYS).ngroups),
               "slope_movement": per_unit_slopes(sub, "movement", slope_max_radius).median()}
        for cert, short in CERTS.items():
            if f"gap_{cert}" not in sub:
                continue
            row[f"slope_{short}"] = per_unit_slopes(sub, f"gap_{cert}", slope_max_radius).median()
            # a unit whose fitted radii hold a gap below the floor (0 or less included: then it has no slope)
            row[f"slopes_below_floor_{short}"] = int(slope_below_floor(sub, f"below_floor_{cert}",
                                                                       slope_max_radius).sum())
        slopes.append(row)
    order = ["model", "mode", "fit_radii", "units", "slope_first", "slope_second", "slope_movement", "slope_tight",
             "slopes_below_floor_first", "slopes_below_floor_second", "slopes_below_floor_tight"]
    slopes = pd.DataFrame(slopes)
    return table, slopes[[c for c in order if c in slopes]]


def secant_above_floor(sub: pd.DataFrame, mode: str) -> dict:
    """Fixed query: the largest gap / secant-slack bound over the units whose gap is above the noise floor, and
    whether the largest ratio over all units comes from a gap below it (the Markdown then marks it)."""
    if mode != "fixed":
        return {"max_gap_over_secant_above_floor": np.nan, "max_gap_over_secant_below_floor": False}
    ratio = sub["gap_second_order"] / sub["secant_bound"]
    above = ratio[~sub["below_floor_second_order"]]
    top = ratio.idxmax() if ratio.notna().any() else None
    return {"max_gap_over_secant_above_floor": above.max() if above.notna().any() else np.nan,
            "max_gap_over_secant_below_floor": bool(top is not None and sub.at[top, "below_floor_second_order"])}


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
#: the column of certification_vs_paper.csv that says whether ours is computed from gaps below the noise floor
PAPER_AT_FLOOR = "ours_below_noise_floor"
PAPER_COLUMN = "paper (GPT-2 small, 2,880 units at query position 4)"


def paper_comparison(table: pd.DataFrame, slopes: pd.DataFrame, df: pd.DataFrame, model: str) -> pd.DataFrame:
    g = gaps_with_floor(df)
    fixed = g[g["mode"] == "fixed"]
    slope_row = slopes[slopes["mode"] == "fixed"]
    lookup = {
        **{k: (slope_row[k].iloc[0] if len(slope_row) else np.nan)
           for k in ("slope_second", "slope_first", "slope_movement")},
        "max_gap_over_secant": (fixed["gap_second_order"] / fixed["secant_bound"]).max(),
        "within10_small": (fixed[fixed["radius"] <= 0.002 + 1e-12]["rel_gap_second_order"] <= 0.10).mean(),
        "median_bracket_over_movement": ((fixed["exact_hi"] - fixed["exact_lo"]) / fixed["movement"]).median(),
    }
    at_floor = {
        **{f"slope_{short}": bool(len(slope_row) and at_floor_count(slope_row[f"slopes_below_floor_{short}"].iloc[0],
                                                                     slope_row["units"].iloc[0]))
           for short in ("first", "second") if f"slopes_below_floor_{short}" in slope_row},
        "max_gap_over_secant": secant_above_floor(fixed, "fixed")["max_gap_over_secant_below_floor"],
    }
    rows = []
    for what, paper, key, where in PAPER_ROWS:
        if isinstance(where, tuple):
            sel = table[(table["mode"] == where[0]) & np.isclose(table["radius"], where[1])]
            ours = sel[key].iloc[0] if len(sel) else np.nan
            below = bool(key == "median_rel_gap_second" and len(sel)
                         and at_floor_count(sel["units_below_floor_second"].iloc[0], sel["units"].iloc[0]))
        else:
            ours, below = lookup[key], at_floor.get(key, False)
        rows.append({"quantity": what, PAPER_COLUMN: paper, f"ours ({model})": ours, PAPER_AT_FLOOR: below})
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
    of the stage from the concatenated unit tables; pure, so the audit recomputes them with this function (and
    their Markdown with `table_markdown`)."""
    label = grid_label(df, model)
    table, slopes = summary_table(df, model)
    viol = violations_table(df)
    tables = {
        "table": (table, f"Certification per radius — {label}. Every certified number of the rows is "
                         f"checked by the audit (`attncert audit`, audit.md beside this table)"),
        "slopes": (slopes, f"Per-unit log-log slopes of the gaps (medians over units) — {label}"),
        "paper": (paper_comparison(table, slopes, df, model), f"Paper A (GPT-2 small) vs reproduced ({label})"),
        "violations": (viol, f"Soundness violations — {label} ({len(viol)} rows)"),
    }
    return label, tables, paper_measurements(df, table, slopes)


def _at_floor(frame: pd.DataFrame, counts: str, units: str = "units") -> list[bool]:
    return [at_floor_count(c, u) for c, u in zip(frame[counts], frame[units])] if counts in frame else \
        [False] * len(frame)


def table_markdown(key: str, frame: pd.DataFrame, title: str) -> str:
    """The Markdown twin of one of the stage's tables (key in STAGE_TABLE_KEYS): `# title`, the table with headers
    in words, its legend, and every median, largest value or slope computed from gaps below the solver noise floor
    marked (the medians: at least half of the units' gaps; a largest value: the unit that attains it)."""
    hide, marks, notes = (), {}, []
    if key == "table":
        columns = table_legend.CERTIFICATION
        hide = ("max_gap_over_secant_below_floor",)
        marks = {f"median_rel_gap_{short}": _at_floor(frame, f"units_below_floor_{short}")
                 for short in ("first", "second", "tight")}
        marks["max_rel_gap_second"] = [bool(u > 0 and c == u) for c, u in
                                       zip(frame.get("units_below_floor_second", 0 * frame["units"]), frame["units"])]
        marks["max_gap_over_secant"] = frame["max_gap_over_secant_below_floor"].astype(bool).tolist()
        notes = [table_legend.UNIT_NOTE]
    elif key == "slopes":
        columns = table_legend.SLOPES
        marks = {f"slope_{short}": _at_floor(frame, f"slopes_below_floor_{short}") for short in ("first", "second",
                                                                                                   "tight")}
        notes = [table_legend.UNIT_NOTE]
    elif key == "paper":
        columns = table_legend.paper_columns(frame.columns[2], PAPER_COLUMN)
        hide = (PAPER_AT_FLOOR,)
        marks = {frame.columns[2]: frame[PAPER_AT_FLOOR].astype(bool).tolist()}
    else:
        columns = table_legend.VIOLATIONS
    marks = {c: m for c, m in marks.items() if c in frame}
    return f"# {title}\n\n" + legend_table(frame, columns, marks=marks, hide=hide, floor=SOLVER_NOISE, notes=notes)


def write_stage_tables(df: pd.DataFrame, model: str, out) -> tuple[str, dict, int]:
    """Write the per-radius table, the slopes, the paper comparison and the soundness violations to
    `out.table`, `out.slopes`, `out.paper`, `out.violations` (CSV and the Markdown twin); returns (grid label,
    measured values, number of violations)."""
    label, tables, measured = stage_tables(df, model)
    for key in STAGE_TABLE_KEYS:
        frame, title = tables[key]
        write_table(frame, getattr(out, key), title, markdown=table_markdown(key, frame, title))
    return label, measured, len(tables["violations"][0])
