"""The certification stage's tables in words: each column's header (with its unit) and definition, for the Markdown
twins of certification.csv, certification_slopes.csv, certification_vs_paper.csv, soundness_violations.csv and for
long_context.md (`reporting.table_legend.legend_table` renders them; the CSV files keep the machine names).

Terms used throughout: a *unit* is one (layer, head, prompt, query position, norm, query mode, radius r); the
*reference value* is the exact worst case (fixed query) or the best value found by ascent (varying query); the
*movement range* is reference − nominal output; the *gap* of a certificate is certificate − reference, its
*relative gap* gap / movement range.
"""
from __future__ import annotations

from attncert.reporting.table_legend import UNIT_KEY, Column

_RELATIVE = "(certificate − reference value) / movement range"
_FIRST, _SECOND, _TIGHT = ("first-order certificate", "second-order certificate (paper-like)",
                           "tight second-order certificate (beyond the paper)")


def _below(short: str, cert: str) -> Column:
    return Column(f"units below the noise floor, {short}",
                  f"units whose {cert} gap is below the solver noise floor (docs/certificate.md §6.1)")


#: the legend line that defines the terms of the per-radius and slope tables
UNIT_NOTE = ("unit: one (layer, head, prompt, query position, ball, query mode, r); reference value: the exact worst "
             "case (fixed query) or the best value found by ascent (varying query); movement range: reference − "
             "nominal output; gap: certificate − reference value")

#: columns shared by the stage's tables
COMMON = {
    "model": Column("model", "the checkpoint the heads come from (Paper A's numbers are GPT-2 small's)"),
    "mode": Column("query", "fixed: only the key tokens move; varying: the query token moves too"),
    "radius": Column("r (ball radius)", "radius of the perturbation ball around every token the head reads"),
    "units": Column("units", "units summarized in the row"),
}

CERTIFICATION = {
    **COMMON,
    "median_rel_gap_first": Column("median relative gap, first-order certificate", f"median over units of {_RELATIVE}"),
    "median_rel_gap_second": Column("median relative gap, second-order certificate",
                                    f"median over units of {_RELATIVE}, the paper-like second-order certificate"),
    "max_rel_gap_second": Column("largest relative gap, second-order certificate",
                                 "largest over units of the second-order certificate's relative gap"),
    "share_within_10pct": Column("share within 10% (second order)",
                                 "share of units whose second-order gap is ≤ 10% of their movement range"),
    "share_within_1pct": Column("share within 1% (second order)",
                                "share of units whose second-order gap is ≤ 1% of their movement range"),
    "max_gap_over_secant": Column("largest second-order gap / secant-slack bound",
                                  "largest over fixed-query units of the second-order gap divided by the "
                                  "value-weighted secant-slack bound B (docs/certificate.md §7; ≤ 1 expected); "
                                  "nan for the varying query (no bound)"),
    "max_gap_over_secant_above_floor": Column(
        "largest gap / secant-slack bound, gaps above the noise floor",
        "the same largest ratio over the units whose second-order gap is above the solver noise floor only"),
    "median_bracket_over_movement": Column("median exact bracket / movement range",
                                           "median over fixed-query units of the width of the certified bracket "
                                           "[exact lo, exact hi] of the worst case, over the movement range"),
    "median_t_exact_s": Column("median time, exact worst case (s)", "median seconds per unit of the exact solver"),
    "median_t_first_s": Column("median time, first order (s)",
                               "median seconds per unit of the first-order certificate"),
    "median_t_second_s": Column("median time, second order (s)",
                                "median seconds per unit of the second-order certificate"),
    "median_rel_gap_tight": Column("median relative gap, tight second-order certificate",
                                   f"median over units of {_RELATIVE}, the tight variant (upper exponential cone "
                                   "added; beyond the paper)"),
    "median_t_second_tight_s": Column("median time, tight second order (s)",
                                      "median seconds per unit of the tight second-order certificate"),
    "status_not_ok": Column("units not ok", "units whose status is not ok (a fallback, an error or a violation)"),
    "units_below_floor_first": _below("first order", _FIRST),
    "units_below_floor_second": _below("second order", _SECOND),
    "units_below_floor_tight": _below("tight", _TIGHT),
}

SLOPES = {
    **COMMON,
    "units": Column("units", "units of the query mode (a unit has a slope when it has two positive gaps at the "
                             "fitted radii)"),
    "fit_radii": Column("fitted radii", "the radii each unit's log-log fit runs over"),
    "slope_first": Column("median gap slope, first order",
                          "median over units of the least-squares slope of log(gap) against log(r), first-order "
                          "certificate (1 = the gap grows like r)"),
    "slope_second": Column("median gap slope, second order",
                           "the same for the second-order certificate (2 = the gap grows like r²)"),
    "slope_movement": Column("median slope of the movement range",
                             "the same for the movement range (1 = it grows like r)"),
    "slope_tight": Column("median gap slope, tight second order", "the same for the tight second-order certificate"),
    "slopes_below_floor_first": Column("slopes through a gap below the noise floor, first order",
                                       "units whose fitted radii hold a first-order gap below the solver noise floor "
                                       "(0 or less included): their slope is noise, or missing"),
    "slopes_below_floor_second": Column("slopes through a gap below the noise floor, second order",
                                        "the same for the second-order certificate"),
    "slopes_below_floor_tight": Column("slopes through a gap below the noise floor, tight",
                                       "the same for the tight second-order certificate"),
}

VIOLATIONS = {
    **UNIT_KEY,
    "mode": COMMON["mode"],
    "radius": COMMON["radius"],
    "quantity": Column("upper bound", "the bound found below an attained value (exact hi or a certificate)"),
    "value": Column("bound", "its value (output units of the head)"),
    "attained": Column("attained value", "the largest value actually attained (exact witness or best ascent)"),
    "shortfall": Column("shortfall", "attained value − bound (> 0: the bound is unsound)"),
}


def paper_columns(ours: str, paper: str) -> dict[str, Column]:
    """certification_vs_paper's columns (ours names the model, so they are built per table)."""
    return {"quantity": Column("quantity", "what is compared (over fixed-query units; a median unless it says so)"),
            paper: Column("paper (GPT-2 small)", "Paper A's value, on 2,880 units at query position 4"),
            ours: Column(ours, "this run's value of the same quantity")}


LONG_CONTEXT = {
    "n_keys": Column("attended keys n", "tokens the head attends to"),
    "radius": COMMON["radius"],
    "units": Column("units", "heads certified at that length and radius"),
    "rel_gap_first_order": Column("median relative gap, first order", f"median over units of {_RELATIVE}"),
    "rel_gap_second_order": Column("median relative gap, second order", "the same for the second-order certificate"),
    "rel_gap_second_order_tight": Column("median relative gap, tight second order",
                                         "the same for the tight second-order certificate (beyond the paper)"),
    "exact_s": Column("median time, exact worst case (s)", "median seconds per unit of the exact solver"),
    "ascent_s": Column("median time, ascent (s)", "median seconds per unit of the best-value search (the reference)"),
    "first_order_s": Column("median time, first order (s)", "median seconds per unit of the first-order certificate"),
    "second_order_s": Column("median time, second order (s)",
                             "median seconds per unit of the second-order certificate"),
    "second_order_tight_s": Column("median time, tight second order (s)",
                                   "median seconds per unit of the tight second-order certificate"),
    "below_floor": Column("units below the noise floor (first / second / tight)",
                          "units whose gap is below the solver noise floor, per certificate"),
    "fallbacks": Column("fallbacks", "units whose second order fell back to a sound labelled bound"),
    "violations": Column("violations", "units with a certificate below an attained value (must be 0)"),
}
