"""Paper A's comparison of the certificate with IBP, CROWN and alpha-CROWN on the same units.

Per unit (same head, tokens, specification c, radius, norm, mode) and method M with upper bound U_M:

    reference g*   exact worst case (fixed query, `exact_hi`) or best feasible value (varying query)
    gap_M          U_M - g*            relative gap  gap_M / (g* - nominal)
    ratio_M        gap_M / gap_second_order      (how many times looser than the certificate)

Soundness: every U_M must be >= every value actually attained (the exact witness `exact_lo`, the best
ascent value); a violation is recorded in the baselines table's `status` as "UNSOUND".

Lost units: a (unit, method) row whose status is neither "ok" nor "UNSOUND" (no bound: "nan: ...",
"error: ..."); `lost_units` lists them with their one-line reason.

Which baseline stands for the paper's (docs/baselines.md, "Which variant stands for the paper's"):
CROWN claims use `crown` (auto_LiRPA's relaxations on our softmax graph; `crown_lirpa_softmax`, the same
on auto_LiRPA's own softmax graph, has its own keys). alpha-CROWN claims use last-layer alpha-CROWN on
auto_LiRPA's softmax graph: auto_LiRPA builds softmax that way, and the paper's alpha-CROWN is only
~15-20% below its CROWN (6.7x vs 7.8x, 17.5x vs 22x), which the last-layer variants show and the full
one (every intermediate bound optimized) does not. The other alpha variants have their own keys.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from attncert.baselines import table_legend
from attncert.baselines.seconds_beside import beside_medians
from attncert.reporting.table_legend import legend_table
from attncert.reporting.noise_floor import SOLVER_NOISE, at_floor_count, gaps_with_floor, slope_below_floor
from attncert.reporting.unit_tables import UNIT_KEYS, per_unit_slopes

KEYS = UNIT_KEYS + ["radius"]
#: The CROWN the paper's CROWN claims are compared with (auto_LiRPA's relaxations).
PAPER_CROWN_METHOD = "crown"
#: The alpha-CROWN the paper's alpha-CROWN claims are compared with (see the module docstring).
PAPER_ALPHA_METHOD = "alpha_crown_last_layer_lirpa_softmax"
PAPER = {  # Paper A, GPT-2 small, query position 4 (see data/paper_claims.yaml)
    ("fixed", "crown"): "3.8–4.7× at every radius",
    ("varying", "crown"): "7.8× (r=0.001) → 22× (r=0.01)",
    ("varying", PAPER_ALPHA_METHOD): "α-CROWN: 6.7× (r=0.001) → 17.5× (r=0.01)",
    ("fixed", "ibp"): "relative gap 5.7–19",
    ("varying", "ibp"): "relative gap 5.7–19",
}
PAPER_SLOPES = {("fixed", "crown"): 2.11, ("varying", "crown"): 2.39}
PAPER_SECONDS = {"ibp": "", "crown": "0.01–0.02", PAPER_ALPHA_METHOD: "0.2–0.7 (α-CROWN)",
                 "second_order": "10 (fixed) / 22 (varying)"}


def merge(baselines: pd.DataFrame, cert: pd.DataFrame) -> pd.DataFrame:
    """One row per unit and method, with the certificate's columns alongside."""
    c = gaps_with_floor(cert)
    cols = KEYS + ["nominal", "reference", "movement", "second_order", "gap_second_order", "t_second_s", "first_order",
                   "below_floor_second_order"]
    cols += [k for k in ("second_order_tight", "gap_second_order_tight", "below_floor_second_order_tight") if k in c]
    b = baselines.copy()
    for k in ("radius",):
        b[k] = b[k].astype(float).round(12)
        c[k] = c[k].astype(float).round(12)
    m = b.merge(c[cols], on=KEYS, how="left")
    m["gap"] = m["upper"] - m["reference"]
    m["rel_gap"] = m["gap"] / m["movement"]
    m["ratio_to_certificate"] = m["gap"] / m["gap_second_order"]
    return m


def comparison_table(m: pd.DataFrame, model: str) -> pd.DataFrame:
    rows = []
    ok = m[m["status"] == "ok"]
    for (mode, r, method), sub in ok.groupby(["mode", "radius", "method"]):
        ratio = sub["ratio_to_certificate"].replace([np.inf, -np.inf], np.nan)
        rows.append({
            "model": model, "mode": mode, "radius": r, "method": method, "units": len(sub),
            "median_rel_gap": sub["rel_gap"].median(),
            "median_rel_gap_certificate": (sub["gap_second_order"] / sub["movement"]).median(),
            "ratio_median": ratio.median(), "ratio_min": ratio.min(), "ratio_max": ratio.max(),
            "share_certificate_tighter": (sub["gap_second_order"] < sub["gap"]).mean(),
            "share_certificate_2x_tighter": (2 * sub["gap_second_order"] <= sub["gap"]).mean(),
            "median_seconds": sub["seconds"].median(),
            "median_seconds_certificate": sub["t_second_s"].median(),
            "paper": PAPER.get((mode, method), ""),
            "units_certificate_below_floor": int(sub["below_floor_second_order"].sum()),
            "ratio_max_below_floor": bool(ratio.notna().any() and sub.at[ratio.idxmax(), "below_floor_second_order"]),
        })
    return pd.DataFrame(rows)


def slope_table(m: pd.DataFrame, model: str, slope_max_radius: float = 0.01) -> pd.DataFrame:
    rows = []
    ok = m[m["status"] == "ok"]
    for (mode, method), sub in ok.groupby(["mode", "method"]):
        units = sub.drop_duplicates(KEYS)
        cert = per_unit_slopes(units, "gap_second_order", slope_max_radius)
        flags = slope_below_floor(units, "below_floor_second_order", slope_max_radius)
        rows.append({"model": model, "mode": mode, "method": method, "fit_radii": f"r ≤ {slope_max_radius}",
                     "median_slope": per_unit_slopes(sub, "gap", slope_max_radius).median(),
                     "median_slope_certificate": cert.median(),
                     "paper_slope": PAPER_SLOPES.get((mode, method), ""),
                     "paper_slope_certificate": 2.05,
                     "units": int(units.groupby(UNIT_KEYS).ngroups),
                     "certificate_slopes_below_floor": int(flags.sum())})
    return pd.DataFrame(rows)


def headline(m: pd.DataFrame, model: str) -> pd.DataFrame:
    """Overall: share of units where the certificate beats CROWN, seconds ratios."""
    ok = m[(m["status"] == "ok") & m["gap_second_order"].notna()]
    rows = []
    for method, sub in ok.groupby("method"):
        rows.append({"model": model, "method": method, "units": len(sub),
                     "share_certificate_tighter": (sub["gap_second_order"] < sub["gap"]).mean(),
                     "share_certificate_2x_tighter": (2 * sub["gap_second_order"] <= sub["gap"]).mean(),
                     "median_seconds": sub["seconds"].median(),
                     "certificate_seconds_over_method_seconds": (sub["t_second_s"] / sub["seconds"]).median(),
                     "paper_seconds": PAPER_SECONDS.get(method, "")})
    return pd.DataFrame(rows)


def lost_units(baselines: pd.DataFrame) -> pd.DataFrame:
    """(unit, method) rows without a bound (status not "ok" and not a soundness violation), with the reason."""
    status = baselines["status"].astype(str)
    lost = baselines[~status.eq("ok") & ~status.str.startswith("UNSOUND")]
    return lost[KEYS + ["method", "status"]].rename(columns={"status": "reason"}).reset_index(drop=True)


def crown_vs_first_order(m: pd.DataFrame, method: str = PAPER_CROWN_METHOD) -> pd.DataFrame:
    """Per mode, at the smallest radius of the grid: share of units where `method`'s upper bound is
    below the first-order certificate (the paper: "at the smallest radius CROWN beats the first-order
    certificate"). Units without either bound are left out (counted in `units`)."""
    rows = []
    sub = m[m["method"] == method]
    for mode, g in sub.groupby("mode"):
        r0 = g["radius"].min()
        g = g[np.isclose(g["radius"], r0)]
        both = g[(g["status"] == "ok") & g["upper"].notna() & g["first_order"].notna()]
        rows.append(
            {
                "mode": mode,
                "radius": r0,
                "method": method,
                "units": len(g),
                "compared": len(both),
                "share_below_first_order": float((both["upper"] < both["first_order"]).mean()) if len(both) else np.nan,
                "median_ratio_gap_to_first_order_gap": float(
                    ((both["upper"] - both["reference"]) / (both["first_order"] - both["reference"])).median()
                )
                if len(both)
                else np.nan,
            }
        )
    return pd.DataFrame(rows)


def paper_measurements(table: pd.DataFrame, slopes: pd.DataFrame, head: pd.DataFrame,
                       first_order: pd.DataFrame | None = None, lost: pd.DataFrame | None = None,
                       n_units: int | None = None) -> dict:
    """Our values for the claim ids of data/paper_claims.yaml (baselines stage).

    CROWN claims use PAPER_CROWN_METHOD ("crown": auto_LiRPA's relaxations), alpha-CROWN claims
    PAPER_ALPHA_METHOD ("alpha_crown_last_layer_lirpa_softmax"); the other variants are given under their own keys.
    Definitions of every key: docs/baselines.md, section "Measured keys"."""
    def rows(mode=None, method=None, radius=None):
        t = table
        if mode:
            t = t[t["mode"] == mode]
        if method:
            t = t[t["method"] == method]
        if radius is not None:
            t = t[np.isclose(t["radius"].astype(float), radius)]
        return t

    def span(series):
        s = series.dropna()
        return [float(s.min()), float(s.max())] if len(s) else None

    def one(series):
        s = series.dropna()
        return float(s.iloc[0]) if len(s) else None

    sl = slopes.set_index(["mode", "method"])["median_slope"]
    hd = head.set_index("method")
    crown, alpha, full = PAPER_CROWN_METHOD, PAPER_ALPHA_METHOD, "alpha_crown"

    def share(column, method=crown):
        return float(hd.loc[method, column]) if method in hd.index else None

    out = {
        "ibp_rel_gap": span(rows(method="ibp")["median_rel_gap"]),
        "crown_slope_fixed": float(sl.get(("fixed", crown), np.nan)),
        "crown_slope_varying": float(sl.get(("varying", crown), np.nan)),
        "alpha_crown_slope_fixed": float(sl.get(("fixed", alpha), np.nan)),
        "alpha_crown_slope_varying": float(sl.get(("varying", alpha), np.nan)),
        "cert_slope_fixed_baseline_grid": float(
            slopes.set_index(["mode", "method"])["median_slope_certificate"].get(("fixed", crown), np.nan)
        ),
        "crown_over_cert_fixed": span(rows("fixed", crown)["ratio_median"]),
        "crown_over_cert_varying_r0.001": one(rows("varying", crown, 0.001)["ratio_median"]),
        "crown_over_cert_varying_r0.01": one(rows("varying", crown, 0.01)["ratio_median"]),
        "cert_tighter_share": share("share_certificate_tighter"),
        "cert_2x_tighter_share": share("share_certificate_2x_tighter"),
        "crown_seconds": span(rows(method=crown)["median_seconds"]),
        "alpha_crown_seconds": span(rows(method=alpha)["median_seconds"]),
        "alpha_crown_over_cert_varying_r0.001": one(rows("varying", alpha, 0.001)["ratio_median"]),
        "alpha_crown_over_cert_varying_r0.01": one(rows("varying", alpha, 0.01)["ratio_median"]),
        "alpha_crown_variant": alpha,
        # the other variants, for the reader (not the paper's methods)
        "alpha_crown_full_over_cert_varying_r0.001": one(rows("varying", full, 0.001)["ratio_median"]),
        "alpha_crown_full_over_cert_varying_r0.01": one(rows("varying", full, 0.01)["ratio_median"]),
        "alpha_crown_full_seconds": span(rows(method=full)["median_seconds"]),
        "crown_mid_over_cert_fixed": span(rows("fixed", "crown_mid")["ratio_median"]),
        "crown_mid_over_cert_varying_r0.001": one(rows("varying", "crown_mid", 0.001)["ratio_median"]),
        "crown_mid_over_cert_varying_r0.01": one(rows("varying", "crown_mid", 0.01)["ratio_median"]),
        "crown_lirpa_softmax_over_cert_fixed": span(rows("fixed", "crown_lirpa_softmax")["ratio_median"]),
        "crown_lirpa_softmax_over_cert_varying_r0.001": one(
            rows("varying", "crown_lirpa_softmax", 0.001)["ratio_median"]
        ),
        "crown_lirpa_softmax_over_cert_varying_r0.01": one(
            rows("varying", "crown_lirpa_softmax", 0.01)["ratio_median"]
        ),
        "alpha_crown_last_layer_over_cert_varying_r0.001": one(
            rows("varying", "alpha_crown_last_layer", 0.001)["ratio_median"]
        ),
        "alpha_crown_last_layer_over_cert_varying_r0.01": one(
            rows("varying", "alpha_crown_last_layer", 0.01)["ratio_median"]
        ),
    }
    if first_order is not None and len(first_order):
        fo = first_order[first_order["method"] == crown].set_index("mode")["share_below_first_order"]
        out["crown_tighter_than_first_order_smallest_r"] = {mode: (None if not np.isfinite(v) else float(v))
                                                             for mode, v in fo.items()}
        ratio = first_order[first_order["method"] == crown].set_index("mode")["median_ratio_gap_to_first_order_gap"]
        if "fixed" in ratio.index and np.isfinite(ratio["fixed"]):
            out["crown_over_first_order_gap_smallest_r"] = float(ratio["fixed"])
    if lost is not None:
        out["baseline_units_lost"] = int(len(lost))
    if n_units is not None:
        out["baseline_units"] = int(n_units)
    return out


def markdown_tables(table: pd.DataFrame, slopes: pd.DataFrame, head: pd.DataFrame, first_order: pd.DataFrame) -> str:
    """The four tables of baselines.md, headers in words, each with its legend (`table_legend`); a ratio or slope
    computed from certificate gaps below the solver noise floor is marked (a median: at least half of its units; the
    largest ratio: the unit that attains it; the smallest: every unit)."""
    if not len(table):  # no bound at all: the empty tables, as they are
        return "\n".join(legend_table(t, cols) for t, cols in ((table, {}), (slopes, {}), (head, {}),
                                                               (first_order, {})))
    below, units = table["units_certificate_below_floor"], table["units"]
    marks = {"ratio_median": [at_floor_count(b, u) for b, u in zip(below, units)],
             "median_rel_gap_certificate": [at_floor_count(b, u) for b, u in zip(below, units)],
             "ratio_min": [bool(u > 0 and b == u) for b, u in zip(below, units)],
             "ratio_max": table["ratio_max_below_floor"].astype(bool).tolist()}
    slope_marks = {"median_slope_certificate": [at_floor_count(b, u) for b, u in zip(
        slopes["certificate_slopes_below_floor"], slopes["units"])]}
    return "\n".join([
        legend_table(table, table_legend.COMPARISON, floatfmt=".3g", marks=marks, hide=("ratio_max_below_floor",),
                     floor=SOLVER_NOISE, notes=table_legend.NOTES),
        "## Per-unit log-log slopes (medians)\n",
        legend_table(slopes, table_legend.SLOPES, floatfmt=".3g", marks=slope_marks, floor=SOLVER_NOISE),
        "## Overall\n",
        legend_table(head, table_legend.HEADLINE, floatfmt=".3g"),
        "## CROWN vs the first-order certificate at the smallest radius\n",
        legend_table(first_order, table_legend.FIRST_ORDER, floatfmt=".3g")])


def stage_report(base: pd.DataFrame, cert: pd.DataFrame, model: str) -> dict:
    """Every table of the baseline stage and its Markdown page: {"table", "slopes", "headline", "md",
    "measured", "label", "labels"} (the label names the model and grid)."""
    from attncert.reporting.table_files import grid_label

    m = merge(base, cert)
    label = grid_label(base.drop(columns=["method"]).drop_duplicates(), model)
    labels = "; ".join(f"{k}: {v}" for k, v in base.groupby("method")["label"].first().items())
    table, slopes, head = comparison_table(m, model), slope_table(m, model), headline(m, model)
    first_order, lost = crown_vs_first_order(m), lost_units(base)
    unsound = base[base["status"].str.startswith("UNSOUND")]
    n_units = len(base.drop_duplicates(KEYS))
    method_lines = "\n".join(f"- `{k}`: {v}" for k, v in base.groupby("method")["label"].first().items())
    md = [
        f"# Baselines vs the second-order certificate — {label}\n",
        f"Methods (docs/baselines.md gives each one's auto_LiRPA counterpart):\n\n{method_lines}\n",
        f"The paper's CROWN is compared with `{PAPER_CROWN_METHOD}`, its α-CROWN with `{PAPER_ALPHA_METHOD}`.\n",
        "Gap ratio = baseline gap / certificate gap on the same unit (paper: GPT-2 small, query position 4).\n",
        markdown_tables(table, slopes, head, first_order),
        f"\nSoundness: {len(unsound)} baseline bounds below an attained value (of {len(base)}).\n",
        f"\nUnits lost: {len(lost)} (unit, method) rows without a bound, of {len(base)} "
        f"({n_units} units × {base['method'].nunique()} methods).\n",
    ]
    if len(lost):
        md.append(legend_table(lost, table_legend.LOST))
    measured = paper_measurements(table, slopes, head, first_order, lost, n_units)
    measured.update(beside_medians(base, {"crown": PAPER_CROWN_METHOD, "alpha_crown": PAPER_ALPHA_METHOD}))
    interval = "95% interval, seconds per unit"
    beside = pd.DataFrame([{"measured key": k, "median seconds per unit": v,
                            interval: "–".join(f"{x:.3g}" for x in measured[f"{k}_ci"] or [])}
                           for k, v in measured.items() if k.endswith("_seconds_beside")])
    md += ["\n## Seconds per unit measured side by side\n",
           f"Medians over the same {measured['seconds_beside_units']} units, timed in the baseline job's process one "
           "after the other (`attncert.baselines.seconds_beside`); the paper's order of speeds is judged on the "
           "medians' 95% intervals.\n",
           legend_table(beside, table_legend.BESIDE, floatfmt=".3g")]
    return {"table": table, "slopes": slopes, "headline": head, "md": "\n".join(md), "label": label,
            "labels": labels, "measured": measured, "merged": m}

