"""The solver noise floor of a gap: derived from the tolerances the certificates are solved to, and every median,
largest value and slope computed from gaps below it marked in the Markdown tables (never shown as a result)."""
import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attncert.baselines import comparison as bc
from attncert.certify import summary, table_legend
from attncert.certify.second_order.dual_bound.solve_ladder import ACCEPT_GAP, SOLVER_LADDER
from attncert.certify.second_order.fixed_query.token_solve import LADDER as TOKEN_LADDER, QUICK as TOKEN_QUICK
from attncert.certify.second_order.varying_query.factored import FACTORED_LADDER
from attncert.certify.second_order.varying_query.long import LONG_LADDER
from attncert.certify.second_order.varying_query.progress_stall import STALL
from attncert.reporting.table_legend import NOISE_MARK, Column, legend_table
from attncert.reporting.noise_floor import SOLVER_NOISE, gap_noise_floor, gaps_with_floor

TOLERANCES = ("tol_gap_abs", "tol_gap_rel", "tol_feas", "eps_abs", "eps_rel")
RADII = (0.0005, 0.001, 0.002, 0.005, 0.01)


def test_the_floor_is_the_coarsest_accuracy_any_certificate_is_solved_to():
    """No ladder of the certificates asks its solver for less than SOLVER_NOISE of the objective unit, and one asks
    for exactly that: loosening a tolerance without the floor (or the floor without a reason) fails here. The long
    path's progress stop (`ProgressStall`: the primal moved <= STALL x the first-order gap, at most one objective
    unit, over its window) is one of them."""
    ladders = (SOLVER_LADDER, FACTORED_LADDER, LONG_LADDER, TOKEN_LADDER, (TOKEN_QUICK,))
    # a rung is (solver, options), or the options of a Clarabel-only ladder
    rungs = [o if isinstance(o, dict) else o[1] for ladder in ladders for o in ladder]
    found = [o[k] for o in rungs for k in TOLERANCES if k in o] + [STALL]
    assert found and max(max(found), ACCEPT_GAP) == SOLVER_NOISE


def test_the_floor_of_a_unit_is_its_objective_unit_times_the_noise_plus_the_exact_bracket():
    df = pd.DataFrame({"mode": ["fixed", "varying", "fixed"], "nominal": [1.0, 1.0, 1.0],
                       "first_order": [1.5, 3.0, np.inf], "exact_lo": [1.2, np.nan, 1.2],
                       "exact_hi": [1.2 + 1e-9, np.nan, 1.2], "best_feasible": [1.2, 1.9, 1.2]})
    floor = gap_noise_floor(df)
    assert floor[0] == pytest.approx(SOLVER_NOISE * 0.5 + 1e-9, rel=1e-6)
    assert floor[1] == pytest.approx(SOLVER_NOISE * 2.0)  # the ascent value is attained: no bracket
    assert np.isnan(floor[2])  # no objective unit: nothing is called noise
    g = gaps_with_floor(df.assign(second_order=[1.2 + 2e-8, 1.9 + 1e-6, 1.3]))
    assert g["below_floor_second_order"].tolist() == [True, False, False]


def _units(below: dict) -> pd.DataFrame:
    """Certification rows of 4 fixed-query units × RADII; (head, radius) in `below`: the gaps are planted 100× below
    the floor (else 100× above), the secant ratio is below[...] (else 0.5)."""
    rows = []
    for head, r in itertools.product(range(4), RADII):
        nominal, move = 0.1, 10 * r
        ref, unit = nominal + move, 1.2 * move
        floor = SOLVER_NOISE * unit
        gap = 0.01 * floor if (head, r) in below else 100 * floor * (r / RADII[0]) ** 2
        ratio = below.get((head, r), 0.5)
        rows.append({"layer": 0, "head": head, "prompt": 0, "query_pos": 4, "radius": r, "norm": "linf",
                     "mode": "fixed", "n_tokens": 8, "nominal": nominal, "exact_lo": ref, "exact_hi": ref,
                     "value_spread": 2.0, "best_feasible": ref, "first_order": nominal + unit,
                     "second_order": ref + gap, "second_order_tight": ref + gap, "secant_bound": gap / ratio,
                     "t_exact_s": 0.1, "t_first_s": 0.1, "t_ascent_s": 0.1, "t_second_s": 0.1,
                     "t_second_tight_s": 0.1, "status": "ok"})
    return pd.DataFrame(rows)


def _cells(md: str, header: str) -> list[str]:
    """The cells of the first Markdown table of `md` under `header`, one per row."""
    text = md.splitlines()
    first = next(i for i, x in enumerate(text) if x.startswith("|"))
    lines = list(itertools.takewhile(lambda x: x.startswith("|"), text[first:]))
    heads = [h.strip() for h in lines[0].strip("|").split("|")]
    col = heads.index(header)
    return [[c.strip() for c in x.strip("|").split("|")][col] for x in lines[2:]]


def _marked(cells) -> list[bool]:
    return [c.endswith(NOISE_MARK) for c in cells]


@settings(max_examples=40)
@given(st.sets(st.tuples(st.integers(0, 3), st.sampled_from(RADII))),
       st.floats(0.6, 3.0))
def test_no_ratio_median_or_slope_from_gaps_below_the_floor_is_shown_unmarked(below, secant_ratio):
    """Planted: some (unit, radius) gaps below the noise floor, with a secant ratio that may be the largest. Each row
    counts them, every median over units is marked exactly when at least half of its units are below the floor, the
    largest gap / secant-slack bound exactly when the unit attaining it is, and every median slope exactly when at
    least half of the units' fits run through such a gap; the same in the paper comparison's rows."""
    below = {k: secant_ratio for k in below}
    df = _units(below)
    _, tables, _ = summary.stage_tables(df, "toy")
    table, title = tables["table"]
    md = summary.table_markdown("table", table, title)
    per_r = {r: sum((h, r) in below for h in range(4)) for r in RADII}
    assert table.set_index("radius")["units_below_floor_second"].to_dict() == per_r
    words = table_legend.CERTIFICATION
    for col in ("median_rel_gap_second", "median_rel_gap_tight"):
        assert _marked(_cells(md, words[col].header)) == [2 * per_r[r] >= 4 for r in table["radius"]]
    assert _marked(_cells(md, words["max_rel_gap_second"].header)) == [per_r[r] == 4 for r in table["radius"]]
    # the largest ratio at a radius is the planted one whenever a planted gap is there (secant_ratio > 0.5)
    assert _marked(_cells(md, words["max_gap_over_secant"].header)) == [per_r[r] > 0 for r in table["radius"]]
    above = _cells(md, words["max_gap_over_secant_above_floor"].header)
    assert all(float(c) == pytest.approx(0.5) for c, r in zip(above, table["radius"]) if per_r[r] < 4)

    slopes, title = tables["slopes"]
    fitted = sum(any((h, r) in below for r in RADII if r <= 0.005) for h in range(4))
    assert slopes["slopes_below_floor_second"].tolist() == [fitted]
    md = summary.table_markdown("slopes", slopes, title)
    assert _marked(_cells(md, table_legend.SLOPES["slope_second"].header)) == [2 * fitted >= 4]

    paper, title = tables["paper"]
    md = summary.table_markdown("paper", paper, title)
    ours = dict(zip(_cells(md, "quantity"), _cells(md, "ours (toy)")))
    assert ours["max gap / secant-slack bound"].endswith(NOISE_MARK) == bool(below)
    assert ours["per-unit slope of the second-order gap"].endswith(NOISE_MARK) == (2 * fitted >= 4)
    assert ours["relative gap, second order, r = 0.002 (median)"].endswith(NOISE_MARK) == (2 * per_r[0.002] >= 4)
    assert not ours["per-unit slope of the movement range"].endswith(NOISE_MARK)
    assert (NOISE_MARK in md) == (f"- {NOISE_MARK} computed from gaps below the solver noise floor" in md)


def test_baseline_ratios_to_a_certificate_gap_below_the_floor_are_marked():
    """A baseline's gap over a certificate gap at the noise floor is a huge, meaningless ratio: its median, its
    largest value and the certificate's slope are marked; above the floor nothing is."""
    rows, base = [], []
    for head, r in itertools.product(range(3), (0.001, 0.01)):
        key = {"layer": 0, "head": head, "prompt": 0, "query_pos": 4, "norm": "linf", "mode": "fixed", "radius": r}
        ref = 1.0 + 10 * r
        rows.append({**key, "nominal": 1.0, "exact_lo": ref, "exact_hi": ref, "best_feasible": ref,
                     "first_order": ref + 3 * r, "second_order": ref + 0.01 * r * r, "t_second_s": 0.5})
        base.append({**key, "method": "crown", "upper": ref + 0.05 * r * r, "attained": ref, "seconds": 0.01,
                     "status": "ok", "label": "CROWN", "seconds_certificate_beside": np.nan})
    cert, base = pd.DataFrame(rows), pd.DataFrame(base)
    clean = bc.stage_report(base, cert, "toy")["md"]
    assert NOISE_MARK not in clean
    noisy = cert.assign(second_order=cert["exact_hi"] + 1e-12)
    rep = bc.stage_report(base, noisy, "toy")
    words = bc.table_legend.COMPARISON
    for col in ("ratio_median", "ratio_max", "ratio_min", "median_rel_gap_certificate"):
        assert all(_marked(_cells(rep["md"], words[col].header))), col
    slopes = rep["md"].split("## Per-unit log-log slopes (medians)")[1]
    assert all(_marked(_cells(slopes, bc.table_legend.SLOPES["median_slope_certificate"].header)))
    assert rep["table"]["units_certificate_below_floor"].tolist() == [3, 3]


def test_a_column_without_wording_or_a_mark_without_a_floor_is_refused():
    df = pd.DataFrame({"a_b": [1.0], "c": [2.0]})
    with pytest.raises(KeyError, match="a_b"):
        legend_table(df, {"c": Column("c in words", "what c is")})
    with pytest.raises(ValueError, match="noise floor"):
        legend_table(df, {"a_b": Column("a", "x"), "c": Column("c", "y")}, marks={"c": [True]})
    md = legend_table(df, {"a_b": Column("a of b (s)", "x"), "c": Column("c", "y")}, marks={"c": [True]},
                      floor=SOLVER_NOISE)
    assert "a of b (s)" in md.splitlines()[0] and "a_b" not in md
    assert "- **a of b (s)**: x" in md and f"2 {NOISE_MARK}" in md and "1e-7 of the relaxation's objective unit" in md
