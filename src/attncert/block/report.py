"""The block-residual tables: derived ratios per unit, the per-radius summary, the paper comparison.

Derived per row (unit = transition x head, at one radius r):
    crown_looseness      = CROWN upper bound / ascent maximum of f
    predicted_looseness  = per-op sum / joint second-order maximum       (radius independent)
    crown_over_perop     = CROWN upper bound / per-op sum
    second_order_dev     = ascent maximum / second-order maximum - 1
    softmax_ratio        = per-op sum (softmax as one op) / per-op sum
Rank correlations use the reference radius r_ref = the largest grid radius <= block.reference_radius;
the "second-order regime" subset is the units with |second_order_dev(r_ref)| <= block.second_order_tolerance.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from attncert.block import table_legend
from attncert.integrity.file_integrity import atomic_path
from attncert.reporting.table_legend import legend_table


def derive(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["crown_looseness"] = df["crown_upper"] / df["ascent_max"]
    df["predicted_looseness"] = df["per_op_sum"] / df["second_order_max"]
    df["predicted_looseness_softmax_one_op"] = df["per_op_sum_softmax_one_op"] / df["second_order_max"]
    df["crown_over_perop"] = df["crown_upper"] / df["per_op_sum"]
    df["second_order_dev"] = df["ascent_max"] / df["second_order_max"] - 1.0
    df["softmax_ratio"] = df["per_op_sum_softmax_one_op"] / df["per_op_sum"]
    df["upper_over_best"] = df["second_order_upper"] / df["second_order_max"]
    df["crown_over_leading_order"] = df["crown_upper"] / df["crown_leading_order"]
    if "second_order_certificate_f" in df:
        lin = df["gradient_norm_l1"] * df["radius"]
        df["linear_movement"] = lin
        df["second_order_certificate_looseness"] = df["second_order_certificate_f"] / df["ascent_max"]
        df["alpha_crown_looseness"] = df["alpha_crown_upper"] / df["ascent_max"]
        df["per_op_looseness"] = df["per_op_sum"] / df["ascent_max"]
        df["second_order_certificate_over_perop"] = df["second_order_certificate_f"] / df["per_op_sum"]
        # gap on g over the first-order movement: (bound on max g - g(0) - r ||grad g||_1) / (r ||grad g||_1)
        df["certificate_gap_g"] = (df["second_order_certificate_g"] - df["g0"] - lin) / lin
        df["crown_gap_g"] = df["crown_upper"] / lin
    return df


def reference_radius(df: pd.DataFrame, block: dict) -> float:
    radii = sorted(df["radius"].unique())
    below = [r for r in radii if r <= block["reference_radius"] * (1 + 1e-12)]
    return below[-1] if below else radii[0]


def grid_label(df: pd.DataFrame) -> str:
    model, family = df["model"].iloc[0], df["family"].iloc[0]
    n_t, n_h = df["transition"].nunique(), df["head"].nunique()
    units = df.groupby(["transition", "head"]).ngroups
    radii = ", ".join(f"{r:g}" for r in sorted(df["radius"].unique()))
    return (
        f"{model} ({family}): {n_t} transitions × {n_h} heads = {units} units; prompt {df['prompt'].iloc[0]}, "
        f"query position {df['position'].iloc[0]}; query token's residual stream perturbed, ℓ∞ box, r ∈ {{{radii}}}"
    )


def rho(x, y) -> tuple[float, float, int]:
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan"), float("nan"), int(ok.sum())
    res = spearmanr(np.asarray(x)[ok], np.asarray(y)[ok])
    return float(res.statistic), float(res.pvalue), int(ok.sum())


def spread(s: pd.Series) -> str:
    s = s[np.isfinite(s)]
    return f"{s.median():.3g} ({s.min():.3g}–{s.max():.3g})" if len(s) else "n/a"


def at_reference(df: pd.DataFrame, block: dict):
    r_ref = reference_radius(df, block)
    ref = df[np.isclose(df["radius"], r_ref)].copy()
    ref["subset"] = ref["second_order_dev"].abs() <= block["second_order_tolerance"]
    return r_ref, ref


def markdown_text(df: pd.DataFrame, title: str, notes: list[str]) -> str:
    """The Markdown twin of a block table: `# title`, the table (4 significant digits) with headers in words, and
    its legend (every column's definition, `block.table_legend`, then the notes)."""
    columns = {**table_legend.SUMMARY, **table_legend.CERTIFICATE}
    if "quantity" in df:
        columns = table_legend.paper_columns(df.columns[2])
    return f"# {title}\n\n" + legend_table(df, columns, notes=notes)


def write_table(df: pd.DataFrame, csv_path: str, md_path: str, title: str, notes: list[str]) -> None:
    with atomic_path(csv_path) as tmp:
        df.to_csv(tmp, index=False)
    with atomic_path(md_path) as tmp:
        tmp.write_text(markdown_text(df, title, notes))


#: The block stage's tables by their key in the rule's outputs (CSV key; the Markdown twin's key adds "_md").
STAGE_TABLE_KEYS = ("summary", "paper", "certificate")


def stage_tables(units: pd.DataFrame, block: dict, claims: list) -> tuple[str, dict[str, tuple], dict]:
    """(grid label, {output key: (table, Markdown title, notes)} in STAGE_TABLE_KEYS order, measured values) from
    the merged units table (`data/block/{model}/units.csv` as read); pure, so the audit recomputes them with it."""
    df = derive(units)
    label = grid_label(df)
    r_ref, _ = at_reference(df, block)
    tables = {
        "summary": (summary_table(df), f"Block residual per radius — {label}", [
            table_legend.UNIT_NOTE, "CROWN looseness: CROWN's bound on max f / ascent maximum; predicted looseness: "
            "per-operation sum / second-order maximum (radius independent)."]),
        "paper": (paper_table(df, block, claims), f"Paper A block residual experiment (GPT-2 small) vs ours — {label}",
                  ["Paper values from data/paper_claims.yaml (paper_a, block_*). Ours: this run; embedded-model "
                   "results are not GPT-2 results.", f"Rank correlations at r = {r_ref:g}."]),
        "certificate": (certificate_table(df),
                        f"Block certificate vs CROWN and α-CROWN per radius (beyond the paper) — {label}",
                        CERTIFICATE_NOTES),
    }
    return label, tables, measured_values(df, block)


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for r, g in df.groupby("radius"):
        rr, pr, n = rho(g["predicted_looseness"], g["crown_looseness"])
        rs, ps, _ = rho(g["predicted_looseness_softmax_one_op"], g["crown_looseness"])
        rows.append({
            "radius": r, "units": len(g),
            "second_order_dev_median": g["second_order_dev"].median(),
            "second_order_abs_dev_min": g["second_order_dev"].abs().min(),
            "second_order_abs_dev_max": g["second_order_dev"].abs().max(),
            "crown_over_perop_median": g["crown_over_perop"].median(),
            "crown_over_perop_min": g["crown_over_perop"].min(), "crown_over_perop_max": g["crown_over_perop"].max(),
            "crown_over_leading_order_median": g["crown_over_leading_order"].median(),
            "crown_over_leading_order_max": g["crown_over_leading_order"].max(),
            "crown_looseness_median": g["crown_looseness"].median(),
            "spearman_rho": rr, "spearman_p": pr,
            "spearman_rho_softmax_one_op": rs, "spearman_p_softmax_one_op": ps,
            "crown_ge_ascent": int((g["crown_upper"] >= g["ascent_max"]).sum()),
            "status_not_ok": int((g["status"] != "ok").sum()),
        })
    return pd.DataFrame(rows)


def claim(claims: list, cid: str) -> dict:
    return next((c for c in claims if c["id"] == cid), {})


def fmt_claim(c: dict) -> str:
    v = c.get("value")
    if isinstance(v, dict):
        lo, hi = v.get("range", [None, None])
        return f"{v.get('median')} ({lo}–{hi})"
    if isinstance(v, list):
        return f"{v[0]}–{v[1]}"
    return "n/a" if v is None else str(v)


def paper_table(df: pd.DataFrame, block: dict, claims: list) -> pd.DataFrame:
    r_ref, ref = at_reference(df, block)
    small = df[df["radius"] <= r_ref * (1 + 1e-12)]
    sub = ref[ref["subset"]]
    ra, pa, na = rho(ref["predicted_looseness"], ref["crown_looseness"])
    rsub, psub, nsub = rho(sub["predicted_looseness"], sub["crown_looseness"])
    rsa, psa, _ = rho(ref["predicted_looseness_softmax_one_op"], ref["crown_looseness"])
    rss, pss, _ = rho(sub["predicted_looseness_softmax_one_op"], sub["crown_looseness"])
    units = ref.groupby(["transition", "head"]).ngroups
    dev = small["second_order_dev"].abs()
    sound = int((df["crown_upper"] >= df["ascent_max"]).sum())
    sm1 = claim(claims, "block_softmax_one_op")
    rows = [
        (
            "units (transitions × heads)",
            fmt_claim(claim(claims, "block_units")),
            f"{units} ({ref['transition'].nunique()} × {ref['head'].nunique()})",
            "one unit = (transition l -> l+1, head of block l+1)",
        ),
        (
            f"|ascent max / second-order term - 1|, r ≤ {r_ref:g}",
            fmt_claim(claim(claims, "block_second_order_match")),
            f"{dev.min():.2g}–{dev.max():.2g} (median {dev.median():.2g})",
            "second-order term = best-found box maximum of 1/2 δᵀHδ",
        ),
        (
            f"CROWN bound / per-op sum, r ≤ {r_ref:g}",
            fmt_claim(claim(claims, "block_crown_over_perop")),
            spread(small["crown_over_perop"]),
            "per radius: figures/tables/<model>/block_summary.md",
        ),
        (
            "Spearman ρ, CROWN vs predicted looseness, subset",
            fmt_claim(claim(claims, "block_spearman_subset")) + " (96 units)",
            f"{rsub:.3f} (p = {psub:.2g}, {nsub} units)",
            f"subset: |ascent/second-order - 1| ≤ {block['second_order_tolerance']:g} at r = {r_ref:g}",
        ),
        (
            "Spearman ρ, all units",
            fmt_claim(claim(claims, "block_spearman_all")) + " (132 units)",
            f"{ra:.3f} (p = {pa:.2g}, {na} units)",
            f"at r = {r_ref:g}",
        ),
        (
            "predicted looseness (per-op sum / joint maximum)",
            fmt_claim(claim(claims, "block_predicted_looseness")),
            spread(ref["predicted_looseness"]),
            "radius independent (both scale as r²)",
        ),
        (
            "effective rank of the curvature",
            fmt_claim(claim(claims, "block_effective_rank")),
            spread(ref["effective_rank"]),
            f"participation ratio (Σ|μ|)²/Σμ² over the eigenvalues of H, d = {int(df['d'].iloc[0])} coordinates",
        ),
        (
            "  … as exp(spectral entropy)",
            "(definition not stated)",
            spread(ref["entropy_rank"]) if "entropy_rank" in ref else "n/a",
            "exp(−Σ p log p), p = |μ| / Σ|μ|",
        ),
        (
            "  … as stable rank",
            "(definition not stated)",
            spread(ref["stable_rank"]) if "stable_rank" in ref else "n/a",
            "‖H‖_F² / ‖H‖₂²",
        ),
        (
            "per-op sum ratio, softmax as one op",
            fmt_claim(sm1),
            f"{ref['softmax_ratio'].min():.3g}–{ref['softmax_ratio'].max():.3g} (median "
            f"{ref['softmax_ratio'].median():.3g})",
            "exps + reciprocals of a head merged into one softmax operation",
        ),
        (
            "Spearman ρ with softmax as one op (subset / all)",
            fmt_claim(claim(claims, "block_spearman_softmax_one_op")) + " (subset)",
            f"{rss:.3f} (p = {pss:.2g}) / {rsa:.3f} (p = {psa:.2g})",
            f"at r = {r_ref:g}",
        ),
        (
            "joint second-order maximum: SDP-dual upper bound / best found",
            "n/a (paper: exact second-order term)",
            spread(ref["upper_over_best"]),
            "brackets the NP-hard box maximum of 1/2 δᵀHδ; not covered by attncert audit",
        ),
        (
            f"CROWN bound / CROWN leading order (r = {sorted(df['radius'].unique())[0]:g})",
            "n/a",
            spread(df.loc[np.isclose(df["radius"], sorted(df["radius"].unique())[0]), "crown_over_leading_order"]),
            "leading order: Σ unary M_n + Σ products |λ| ‖j_x‖₁‖j_y‖₁ (docs/block_residual.md §5)",
        ),
        (
            "CROWN bound ≥ ascent maximum",
            "every unit (sound)",
            f"{sound} of {len(df)} (unit, radius) rows",
            "CROWN via bound_propagation 0.4.7, float64, rounding margin added",
        ),
    ]
    return pd.DataFrame(rows, columns=["quantity", "paper (GPT-2 small)", f"ours ({df['model'].iloc[0]})", "note"])


def measured_values(df: pd.DataFrame, block: dict) -> dict:
    """Our values for the block_* claim ids of data/paper_claims.yaml."""
    r_ref, ref = at_reference(df, block)
    small = df[df["radius"] <= r_ref * (1 + 1e-12)]
    sub = ref[ref["subset"]]

    def med_range(s):
        s = s[np.isfinite(s)]
        return {"median": float(s.median()), "range": [float(s.min()), float(s.max())]}

    dev = small["second_order_dev"].abs()
    return {
        "block_units": int(ref.groupby(["transition", "head"]).ngroups),
        "block_subset_units": int(sub.groupby(["transition", "head"]).ngroups),
        "block_second_order_match": [float(dev.min()), float(dev.max())],
        "block_crown_over_perop": med_range(small["crown_over_perop"]),
        "block_spearman_subset": rho(sub["predicted_looseness"], sub["crown_looseness"])[0],
        "block_spearman_all": rho(ref["predicted_looseness"], ref["crown_looseness"])[0],
        "block_spearman_softmax_one_op": rho(sub["predicted_looseness_softmax_one_op"], sub["crown_looseness"])[0],
        "block_predicted_looseness": med_range(ref["predicted_looseness"]),
        "block_effective_rank": med_range(ref["effective_rank"]),
        **({"block_effective_rank_entropy": med_range(ref["entropy_rank"]),
            "block_effective_rank_stable": med_range(ref["stable_rank"])} if "entropy_rank" in ref else {}),
        "block_softmax_one_op": [float(ref["softmax_ratio"].min()), float(ref["softmax_ratio"].max())],
        **certificate_measured(df),
    }


# --------------------------------------------------------------------------------------------------
# The sound block certificate: bound / ascent maximum per radius, beside CROWN and alpha-CROWN
# --------------------------------------------------------------------------------------------------
def _median(s: pd.Series) -> float:
    """Median over units with +inf kept (an infinite bound counts as the largest), NaN if none or all NaN."""
    s = s[~np.isnan(s)]
    return float(np.median(s)) if len(s) else float("nan")


def certificate_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per radius: medians over units of bound / ascent maximum for the second-order certificate, the reported
    bound (the smaller of it and CROWN's), CROWN and alpha-CROWN; the gap on g over the linear movement; counts."""
    rows = []
    per_transition = df.groupby("transition").first()
    heads = df.groupby("transition")["head"].nunique()
    cert_s = (per_transition["cpu_seconds_certificate"] / heads).median()
    crown_s = (per_transition["cpu_seconds_crown"] / heads).median()
    for r, g in df.groupby("radius"):
        rows.append({
            "radius": r, "units": len(g),
            "second_order_certificate_over_ascent": _median(g["second_order_certificate_looseness"]),
            "crown_over_ascent": _median(g["crown_looseness"]),
            "alpha_crown_over_ascent": _median(g["alpha_crown_looseness"]),
            "per_op_sum_over_ascent": _median(g["per_op_looseness"]),
            "second_order_certificate_over_perop": _median(g["second_order_certificate_over_perop"]),
            "certificate_gap_g_over_linear": _median(g["certificate_gap_g"]),
            "crown_gap_g_over_linear": _median(g["crown_gap_g"]),
            "second_order_not_finite": int((~np.isfinite(g["second_order_certificate_f"])).sum()),
            "from_layer_norm_range": (int(g["from_range_f"].fillna(False).astype(bool).sum())
                                      if "from_range_f" in g else 0),
            "second_order_below_crown": int((g["second_order_certificate_f"] < g["crown_upper"]).sum()),
            "violations": int((~(g["certificate_f"] >= g["ascent_max"])).sum()),
            "cpu_seconds_per_unit_certificate": float(cert_s), "cpu_seconds_per_unit_crown": float(crown_s),
        })
    return pd.DataFrame(rows)


CERTIFICATE_NOTES = [
    table_legend.UNIT_NOTE,
    "The second-order block certificate: a cubic Taylor model of the block map (the centre quadratic plus a signed "
    "cubic form r³uᵀPu, maximized jointly by one verified SDP dual of ±H0 + 2rP per radius, read off a "
    "near-optimal primal of the SDP found by the mixing method (block/mixing_dual.py), and a fourth-order rest "
    "bounded per sense; the softmax's scores shifted by their weighted mean motion c_h·δ, the quadratic pieces "
    "summed with their signs, a few rows' quadratic parts through their formed Hessians; block/certificate.py, "
    "block/taylor_model.py). Each number is capped by the output LayerNorm's range (s c·β + √d‖P(c∘γ)‖₂ on g, "
    "plus r‖∇g(0)‖₁ on f; finite whatever the radius, block/layer_norm_range.py): where the Taylor model's enclosures "
    "blow up (scores moving by O(1) over the box) the cap is the certificate, counted per radius.",
    "The certificate columns of units.csv (certificate_f, certificate_g and their negations) are the second-order "
    "certificate's alone, each re-derived from the weights by attncert audit; CROWN and α-CROWN are baselines "
    "beside it, never a certificate.",
]


def certificate_measured(df: pd.DataFrame) -> dict:
    """Our values for the block_certificate_* claim ids (beyond the paper)."""
    out = {}
    if "second_order_certificate_f" not in df:
        return out
    for r, g in df.groupby("radius"):
        out[f"block_certificate_over_perop_r{r:g}"] = _median(g["second_order_certificate_over_perop"])
        out[f"block_certificate_over_ascent_r{r:g}"] = _median(g["second_order_certificate_looseness"])
    violations = int((~(df["certificate_f"] >= df["ascent_max"])).sum())
    out["block_certificate_violations"] = violations
    out["block_certificate_sound_and_finite"] = bool(violations == 0 and np.isfinite(df["certificate_f"]).all()
                                                     and np.isfinite(df["certificate_g"]).all())
    return out
