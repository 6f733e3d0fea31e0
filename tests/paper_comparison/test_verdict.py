"""The verdict function (attncert.paper_comparison.verdict): the verdict kinds on real claims, and every branch."""
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from attncert.paper_comparison.claims import Claim, load_claims
from attncert.paper_comparison.verdict import (DIFFERS, NA, QUALITATIVE, REPRODUCED, SETUP_DIFFERS, STRONGER,
                                       accepted_interval, uncapped_verdict, verdict)

REPO = Path(__file__).resolve().parents[2]
CLAIMS = load_claims(REPO / "data" / "paper_claims.yaml").by_id()
OTHER_MODEL = "set-up paper_a_model: ours all-MiniLM-L6-v2, paper GPT-2 small"


def claim(**kw) -> Claim:
    base = dict(id="c", paper="A", value=1.0, unit="u", form="value", measured="c", tolerance=None, better="none",
                why="w", sentence="s")
    return Claim(**{**base, **kw})


# --- the verdict kinds, on the claims of data/paper_claims.yaml ---------------------------------------

@pytest.mark.parametrize("ours", [32.0, [31.6, 34.5], [3.9, 32.0]])
def test_32x_against_3_8_to_4_7x_is_not_reproduced(ours):
    c = CLAIMS["crown_over_cert_fixed"]
    assert uncapped_verdict(c, ours) == QUALITATIVE          # the certificate is still the tighter (ratio > 1)
    assert verdict(c, ours).kind != REPRODUCED
    assert verdict(c, ours, OTHER_MODEL).kind != REPRODUCED


def test_ratio_inside_the_papers_band_is_reproduced_and_below_one_differs():
    c = CLAIMS["crown_over_cert_fixed"]
    assert verdict(c, [3.9, 4.5]).kind == REPRODUCED
    assert verdict(c, 0.8).kind == DIFFERS


def test_190_against_1272_inputs_is_setup_differs():
    assert verdict(CLAIMS["witness_suite_size"], 190).kind == SETUP_DIFFERS
    assert verdict(CLAIMS["witness_suite_size"], 1272).kind == REPRODUCED


def test_0_06_s_against_10_s_is_stronger():
    c = CLAIMS["cert_seconds_fixed"]
    assert verdict(c, 0.06).kind == STRONGER
    assert verdict(c, 12.0).kind == REPRODUCED
    assert verdict(c, 100.0).kind == DIFFERS


def test_slope_2_01_against_2_04_is_reproduced():
    c = CLAIMS["second_order_slope"]
    assert verdict(c, 2.01).kind == REPRODUCED
    assert verdict(c, 2.6).kind == QUALITATIVE               # still at least quadratic, outside ±0.1
    assert verdict(c, 1.0).kind == DIFFERS


values = st.one_of(st.floats(-1e6, 1e6), st.booleans(),
                   st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=2))


@given(ours=values)
def test_a_claim_with_a_different_metric_is_never_reproduced(ours):
    metric_claims = [c for c in CLAIMS.values() if c.our_metric] + [
        claim(our_metric="another metric"), claim(form="band", value=[0, 10], better="lower", our_metric="x"),
        claim(form="holds", value=True, our_metric="x")]
    assert len(metric_claims) > 3
    for c in metric_claims:
        if c.form == "holds" and not isinstance(ours, bool) or c.form != "holds" and isinstance(ours, bool):
            continue
        v = verdict(c, ours)
        assert v.kind not in (REPRODUCED, STRONGER), (c.id, ours, v)


# --- the rule, branch by branch ------------------------------------------------------------------------------------

def test_tolerance_kinds_widen_the_papers_interval():
    assert accepted_interval(claim(value=[2.0, 4.0], form="band", tolerance=("abs", 0.5))) == (1.5, 4.5)
    assert accepted_interval(claim(value=[2.0, 4.0], form="band", tolerance=("rel", 0.25))) == (1.5, 5.0)
    assert accepted_interval(claim(value=[2.0, 4.0], form="band", tolerance=("factor", 2.0))) == (1.0, 8.0)
    assert accepted_interval(claim(value=3.0, form="at_most", tolerance=("rel", 0.1))) == (
        -math.inf,
        pytest.approx(3.3),
    )
    assert accepted_interval(claim(value=3.0, form="at_least", tolerance=("factor", 3.0))) == (1.0, math.inf)


def test_better_direction_decides_stronger():
    lower = claim(value=1.0, tolerance=("rel", 0.1), better="lower", direction=(0.0, 10.0))
    assert verdict(lower, 0.5).kind == STRONGER
    assert verdict(lower, 1.05).kind == REPRODUCED
    assert verdict(lower, [0.5, 1.05]).kind == REPRODUCED    # partly better, nowhere worse than tolerance
    assert verdict(lower, 2.0).kind == QUALITATIVE
    assert verdict(lower, 20.0).kind == DIFFERS
    higher = replace(lower, better="higher")
    assert verdict(higher, 2.0).kind == STRONGER and verdict(higher, 0.5).kind == QUALITATIVE
    none = replace(lower, better="none")
    assert verdict(none, 0.5).kind == QUALITATIVE and verdict(none, 1.0).kind == REPRODUCED


def test_limits_are_reproduced_not_stronger_and_strict_limits_are_open():
    at_most = claim(value=0.5, form="at_most", better="lower", strict=True)
    assert verdict(at_most, 1e-9).kind == REPRODUCED
    assert verdict(at_most, 0.5).kind == DIFFERS
    at_least = claim(value=0.5, form="at_least", better="higher")
    assert verdict(at_least, 0.5).kind == REPRODUCED and verdict(at_least, 0.4).kind == DIFFERS
    assert verdict(replace(at_least, strict=True), 0.5).kind == DIFFERS


def test_median_range_values_are_judged_on_the_median():
    c = claim(value={"median": 1.63, "range": [1.26, 2.34]}, tolerance=("rel", 0.25), direction=(1.0, math.inf))
    assert verdict(c, {"median": 1.7, "range": [1.0, 9.0]}).kind == REPRODUCED
    assert verdict(c, {"median": 1.1, "range": [1.0, 1.2]}).kind == QUALITATIVE


def test_holds_ordered_and_setup_forms():
    holds = claim(form="holds", value=True)
    assert verdict(holds, True).kind == REPRODUCED and verdict(holds, False).kind == DIFFERS
    with pytest.raises(TypeError, match="boolean"):
        verdict(holds, 0.3)
    ordered = claim(form="ordered", value=[1, 2], measured=("a", "b"))
    assert verdict(ordered, [1.0, 2.0]).kind == REPRODUCED
    assert verdict(ordered, [[0.01, 0.02], [0.2, 0.7]]).kind == REPRODUCED
    assert verdict(ordered, [[0.01, 0.5], [0.2, 0.7]]).kind == DIFFERS   # ranges overlap
    assert verdict(ordered, [1.0, None]).kind == NA
    # better = lower: the last key (e.g. the certificate's time) below the one before it beats the claimed order
    faster = claim(form="ordered", value=[0.02, 0.7, 10], measured=("a", "b", "c"), better="lower")
    assert verdict(faster, [[0.01, 0.02], [0.2, 0.7], 10.0]).kind == REPRODUCED
    assert verdict(faster, [[0.01, 0.02], [0.03, 0.05], 0.025]).kind == STRONGER
    assert verdict(faster, [[0.01, 0.02], [0.03, 0.05], 0.04]).kind == DIFFERS     # overlaps the one before it
    assert verdict(faster, [[0.03, 0.05], [0.01, 0.02], 10.0]).kind == DIFFERS     # the others out of order
    assert verdict(ordered, [2.0, 1.0]).kind == DIFFERS                            # better = none: no stronger
    # a factor tolerance: values within the factor of each other are in no order
    beside = claim(form="ordered", value=[0.02, 0.7, 10], measured=("a", "b", "c"), better="lower",
                   tolerance=("factor", 1.5))
    assert verdict(beside, [0.010, 0.020, 0.031]).kind == REPRODUCED
    assert verdict(beside, [0.010, 0.014, 0.031]).kind == DIFFERS                  # CROWN and α-CROWN within 1.5×
    assert verdict(beside, [0.010, 0.020, 0.025]).kind == DIFFERS                  # certificate within 1.5× of α
    assert verdict(beside, [0.010, 0.020, 0.012]).kind == STRONGER                 # certificate 1.7× faster than α
    # intervals (of medians): a step holds only between the upper end of one and the lower end of the next
    assert verdict(beside, [[0.009, 0.011], [0.020, 0.024], [0.040, 0.050]]).kind == REPRODUCED
    assert verdict(beside, [[0.009, 0.011], [0.013, 0.017], [0.040, 0.050]]).kind == DIFFERS  # medians 1.5x apart,
    assert verdict(beside, [[0.009, 0.011], [0.017, 0.019], [0.027, 0.031]]).kind == DIFFERS  # their intervals not
    assert verdict(faster, [0.010, 0.020, 0.025]).kind == REPRODUCED               # no factor: any order counts
    setup = claim(form="setup", value="GPT-2 small")
    assert verdict(setup, "gpt-2 small").kind == REPRODUCED and verdict(setup, "all-MiniLM-L6-v2").kind == SETUP_DIFFERS


@pytest.mark.parametrize("ours", [None, float("nan"), [], {}])
def test_nothing_measured_is_na(ours):
    assert verdict(claim(), ours).kind == NA


def test_a_setup_difference_caps_at_qualitative_and_keeps_the_uncapped_verdict():
    c = CLAIMS["cert_seconds_fixed"]
    v = verdict(c, 0.06, OTHER_MODEL)
    assert (v.kind, v.uncapped) == (QUALITATIVE, STRONGER) and "all-MiniLM-L6-v2" in v.note
    assert verdict(c, 100.0, OTHER_MODEL).kind == DIFFERS   # a cap never raises a verdict


@given(x=st.floats(-1e3, 1e3), lo=st.floats(-10, 10), width=st.floats(0, 10), t=st.floats(0, 1))
def test_the_cap_never_raises_and_reproduced_means_inside_the_tolerance(x, lo, width, t):
    c = claim(form="band", value=[lo, lo + width], tolerance=("abs", t), direction=(lo - 5, lo + width + 5))
    v = verdict(c, x, "other set-up")
    assert v.kind == (DIFFERS if v.uncapped == DIFFERS else QUALITATIVE)
    assert (uncapped_verdict(c, x) == REPRODUCED) == (lo - t <= x <= lo + width + t)
