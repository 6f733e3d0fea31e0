"""The block stage's tables in words: each column's header (with its unit) and definition, for the Markdown twins of
block_summary.csv, block_vs_paper.csv and block_certificate.csv (`reporting.table_legend.legend_table` renders
them; the CSV files keep the machine names). Terms (docs/block_residual.md): f = g − g(0) − ∇g(0)·δ is the nonlinear
remainder of the block's output g; the *ascent maximum* is the best value of f found by multi-start ascent (a lower
bound on max f); the *second-order maximum* M is the best-found box maximum of ½ δᵀHδ; the *per-operation sum* S
adds every operation's own second-order worst case; *predicted looseness* = S / M.
"""
from __future__ import annotations

from attncert.reporting.table_legend import Column

UNIT_NOTE = ("unit: one block transition l → l+1 and one head of block l+1, at one radius r of the ℓ∞ box around the "
             "query token's residual stream")

_RADIUS = Column("r (box radius)", "half-width of the ℓ∞ box around the query token's residual stream")
_UNITS = Column("units", "units (transition × head) at that radius")

SUMMARY = {
    "radius": _RADIUS,
    "units": _UNITS,
    "second_order_dev_median": Column("median ascent / second-order maximum − 1",
                                      "median over units of ascent maximum / M − 1 (0: f is its second-order term)"),
    "second_order_abs_dev_min": Column("smallest |ascent / second-order maximum − 1|",
                                       "smallest over units of the absolute deviation"),
    "second_order_abs_dev_max": Column("largest |ascent / second-order maximum − 1|",
                                       "largest over units of the absolute deviation"),
    "crown_over_perop_median": Column("median CROWN / per-operation sum",
                                      "median over units of CROWN's bound on max f / the per-operation sum S"),
    "crown_over_perop_min": Column("smallest CROWN / per-operation sum", "smallest over units of the same ratio"),
    "crown_over_perop_max": Column("largest CROWN / per-operation sum", "largest over units of the same ratio"),
    "crown_over_leading_order_median": Column("median CROWN / its leading order",
                                              "median over units of CROWN's bound / its r² leading order "
                                              "(docs/block_residual.md §5; → 1 as r → 0)"),
    "crown_over_leading_order_max": Column("largest CROWN / its leading order", "largest over units of the same ratio"),
    "crown_looseness_median": Column("median CROWN looseness", "median over units of CROWN's bound / ascent maximum"),
    "spearman_rho": Column("Spearman ρ (CROWN vs predicted looseness)",
                           "rank correlation over the units at that radius of CROWN looseness with predicted "
                           "looseness S / M (scipy.stats.spearmanr)"),
    "spearman_p": Column("p-value of ρ", "its two-sided p-value"),
    "spearman_rho_softmax_one_op": Column("Spearman ρ, softmax as one operation",
                                          "the same with each head's exps and reciprocals merged into one softmax "
                                          "operation in S"),
    "spearman_p_softmax_one_op": Column("p-value of ρ, softmax as one operation", "its two-sided p-value"),
    "crown_ge_ascent": Column("units where CROWN ≥ ascent", "units whose CROWN bound is above the ascent maximum "
                                                            "(sound; must equal the units)"),
    "status_not_ok": Column("units not ok", "units whose status is not ok"),
}

CERTIFICATE = {
    "radius": _RADIUS,
    "units": _UNITS,
    "second_order_certificate_over_ascent": Column(
        "median certificate / ascent", "median over units of the sound second-order block certificate's bound on "
        "max f / ascent maximum (block/certificate.py; +inf bounds count as the largest)"),
    "crown_over_ascent": Column("median CROWN / ascent", "the same for CROWN (a baseline, not a certificate)"),
    "alpha_crown_over_ascent": Column("median α-CROWN / ascent",
                                      "the same for α-CROWN (a baseline; nan when block.alpha_crown is off)"),
    "per_op_sum_over_ascent": Column("median per-operation sum / ascent",
                                     "the same for the per-operation sum S (r² times the operations' maxima)"),
    "second_order_certificate_over_perop": Column("median certificate / per-operation sum",
                                                  "median over units of the certificate's bound / S"),
    "certificate_gap_g_over_linear": Column(
        "median certificate gap on g / linear movement",
        "median over units of (bound on max g − g(0) − r‖∇g(0)‖₁) / (r‖∇g(0)‖₁), the certificate"),
    "crown_gap_g_over_linear": Column("median CROWN gap on g / linear movement",
                                      "the same with CROWN's bound on f in the numerator"),
    "second_order_not_finite": Column("units with an infinite certificate",
                                      "units where an enclosure reaches a singularity (the rsqrt input's range "
                                      "reaching 0): the certificate is +inf"),
    "from_layer_norm_range": Column("units capped by the output LayerNorm's range",
                                    "units whose bound on max f is the output LayerNorm's range (finite at any "
                                    "radius) because the Taylor model's is larger there"),
    "second_order_below_crown": Column("units where the certificate beats CROWN",
                                       "units whose certificate bound is below CROWN's"),
    "violations": Column("violations", "units whose certificate lies below the ascent maximum or is nan (must be 0)"),
    "cpu_seconds_per_unit_certificate": Column("CPU time per unit, certificate (s)",
                                               "per-transition CPU seconds of the certificate over its heads, "
                                               "median over transitions"),
    "cpu_seconds_per_unit_crown": Column("CPU time per unit, CROWN (s)", "the same for CROWN"),
}


def paper_columns(ours: str) -> dict[str, Column]:
    """block_vs_paper's columns (ours names the model, so they are built per table)."""
    return {"quantity": Column("quantity", "what is compared"),
            "paper (GPT-2 small)": Column("paper (GPT-2 small)", "Paper A's value (132 units of GPT-2 small)"),
            ours: Column(ours, "this run's value: median (range) over units where it is a spread"),
            "note": Column("note", "how ours is measured")}
