"""The baseline stage's tables in words (baselines.md): each column's header (with its unit) and definition, for
the per-radius comparison, the slopes, the overall shares, CROWN vs the first-order certificate, the lost units and
the side-by-side seconds (`reporting.table_legend.legend_table` renders them; the CSV files keep the machine names).

The certificate beside the baselines is the second-order (paper-like) certificate; a method's *gap* is its upper
bound − the reference value (exact worst case for a fixed query, best ascent value for a varying one).
"""
from __future__ import annotations

from attncert.reporting.table_legend import UNIT_KEY, Column

_UNIT = ("unit: one (layer, head, prompt, query position, ball, query mode, r); gap: upper bound − reference value "
         "(the exact worst case for a fixed query, the best ascent value for a varying one); relative gap: gap / "
         "movement range (reference − nominal output); the certificate: the second-order (paper-like) certificate")
NOTES = [_UNIT]

COMMON = {
    "model": Column("model", "the checkpoint the heads come from (Paper A's numbers are GPT-2 small's)"),
    "mode": Column("query", "fixed: only the key tokens move; varying: the query token moves too"),
    "radius": Column("r (ball radius)", "radius of the perturbation ball around every token the head reads"),
    "method": Column("method", "the bound-propagation baseline (its code; the list above says what each one is)"),
    "units": Column("units", "units with a bound of the method in the row"),
}

COMPARISON = {
    **COMMON,
    "median_rel_gap": Column("median relative gap, method", "median over units of the method's relative gap"),
    "median_rel_gap_certificate": Column("median relative gap, certificate",
                                         "median over the same units of the certificate's relative gap"),
    "ratio_median": Column("median gap ratio (method / certificate)",
                           "median over units of the method's gap / the certificate's gap on the same unit "
                           "(how many times looser the method is)"),
    "ratio_min": Column("smallest gap ratio", "smallest over units of the same ratio"),
    "ratio_max": Column("largest gap ratio", "largest over units of the same ratio"),
    "share_certificate_tighter": Column("share certificate tighter",
                                        "share of units where the certificate's gap is smaller than the method's"),
    "share_certificate_2x_tighter": Column("share certificate ≥ 2× tighter",
                                           "share of units where the certificate's gap is at most half the method's"),
    "median_seconds": Column("median time, method (s)", "median seconds per unit of the method"),
    "median_seconds_certificate": Column("median time, certificate (s)",
                                         "median seconds per unit of the certificate (its own job)"),
    "paper": Column("paper (GPT-2 small)", "Paper A's value for this method and query, where it states one"),
    "units_certificate_below_floor": Column("units with the certificate's gap below the noise floor",
                                            "units whose certificate gap is below the solver noise floor "
                                            "(docs/certificate.md §6.1): their ratio is not a result"),
}

SLOPES = {
    **COMMON,
    "units": Column("units", "units of the query mode with a bound of the method (a unit has a slope when it has two "
                             "positive gaps at the fitted radii)"),
    "fit_radii": Column("fitted radii", "the radii each unit's log-log fit runs over"),
    "median_slope": Column("median gap slope, method",
                           "median over units of the least-squares slope of log(gap) against log(r), the method"),
    "median_slope_certificate": Column("median gap slope, certificate", "the same for the certificate"),
    "paper_slope": Column("paper's slope, method", "Paper A's slope for the method, where it states one"),
    "paper_slope_certificate": Column("paper's slope, certificate", "Paper A's slope of the certificate's gap"),
    "certificate_slopes_below_floor": Column("certificate slopes through a gap below the noise floor",
                                             "units whose fitted radii hold a certificate gap below the solver noise "
                                             "floor (0 or less included): their slope is noise, or missing"),
}

HEADLINE = {
    "model": COMMON["model"],
    "method": COMMON["method"],
    "units": Column("units", "units (both query modes, every radius) with bounds of the method and the certificate"),
    "share_certificate_tighter": COMPARISON["share_certificate_tighter"],
    "share_certificate_2x_tighter": COMPARISON["share_certificate_2x_tighter"],
    "median_seconds": COMPARISON["median_seconds"],
    "certificate_seconds_over_method_seconds": Column("median time ratio (certificate / method)",
                                                      "median over units of the certificate's seconds / the "
                                                      "method's seconds"),
    "paper_seconds": Column("paper's seconds per unit", "Paper A's seconds per unit of the method"),
}

FIRST_ORDER = {
    "mode": COMMON["mode"],
    "radius": Column("r (ball radius)", "the smallest radius of the baseline grid"),
    "method": COMMON["method"],
    "units": Column("units", "units of the method at that radius"),
    "compared": Column("units compared", "units with both the method's bound and the first-order certificate"),
    "share_below_first_order": Column("share method below first order",
                                      "share of those where the method's bound is below the first-order certificate"),
    "median_ratio_gap_to_first_order_gap": Column("median gap ratio (method / first order)",
                                                  "median of the method's gap / the first-order certificate's gap"),
}

LOST = {
    **UNIT_KEY,
    "mode": COMMON["mode"],
    "radius": COMMON["radius"],
    "method": COMMON["method"],
    "reason": Column("reason", "why the method gave no bound"),
}

BESIDE = {
    "measured key": Column("measured key", "the key of baselines_measured.json (cert: the second-order certificate)"),
    "median seconds per unit": Column("median seconds per unit", "median over the same units, timed side by side"),
    "95% interval, seconds per unit": Column("95% interval, seconds per unit",
                                             "distribution-free 95% confidence interval of the median"),
}
