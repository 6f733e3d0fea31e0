"""One certification row: every column filled, the bounds ordered, and a soundness violation never silent."""
import dataclasses
import math

import numpy as np
import pytest

from attncert.certify.exact_worst_case import exact_worst_case
from attncert.certify.second_order.dual_bound.solve_ladder import ACCEPT_GAP
from attncert.certify.layer_run import certify_layer_units
from attncert.certify.run import COLUMNS, certify_unit, in_check_sample, varying_ascents
from attncert.head.unit_grid import grid
from attncert.head.units import head_problem
from attncert.head.fixed_query import fixed_query_reduction
from attncert.head.problem import random_head_problem
from attncert.reporting.unit_tables import soundness_check


def test_certify_unit_fixed_and_varying_rows():
    for mode in ("fixed", "varying"):
        p = random_head_problem(np.random.default_rng(4), d=5, d_head=3, n=4, radius=0.02, mode=mode)
        row = certify_unit(p, ascent_restarts=2, ascent_steps=30)
        assert set(COLUMNS) <= set(row) and row["status"] == "ok", row["error"]
        assert row["first_order"] >= row["second_order"] >= row["best_feasible"] >= row["nominal"] - 1e-12
        # tighter up to solver tolerance (each accepted dual may lie ACCEPT_GAP x max(1, |primal|) above its
        # primal; the factored varying program's solves reach ~5e-9 here), still sound
        tol = 2.0 * ACCEPT_GAP * (1 + abs(row["second_order"]))
        assert row["second_order_tight"] <= row["second_order"] + tol
        assert row["second_order_tight"] >= row["best_feasible"]
        if mode == "fixed":
            assert row["exact_hi"] >= row["exact_lo"] >= row["best_feasible"] - 1e-12
            assert row["second_order"] >= row["exact_hi"] and math.isfinite(row["secant_bound"])
        else:
            assert math.isnan(row["exact_hi"]) and math.isnan(row["secant_bound"])


def test_soundness_check_flags_a_bound_below_an_attained_value():
    row = {"best_feasible": 1.0, "exact_lo": 1.2, "exact_hi": 1.3, "first_order": 1.5, "second_order": 1.1}
    msgs = soundness_check(row)
    assert len(msgs) == 1 and msgs[0].startswith("second_order")
    row["second_order"] = 1.2 - 1e-12  # float noise is not a violation
    assert soundness_check(row) == []


def test_row_finite_when_scores_move_by_hundreds():
    """Weight scale 6, r = 2 (fixed query, linf): scores move by ~900, every lower exponential underflows.
    The row's exact bracket, first-order certificate and ascent are finite and sound, and
    the exact bracket's status is reported in the appended `exact_status` column."""
    p = random_head_problem(np.random.default_rng(3), d=4, d_head=2, n=4, radius=2.0, norm="linf", scale=6.0)
    data = fixed_query_reduction(p)
    assert p.radius * np.abs(data.u_s).sum() > 370
    row = certify_unit(p, ascent_restarts=4, ascent_steps=40, second_order=False)  # (secant: with second order)
    for k in ("exact_lo", "exact_hi", "value_spread", "first_order", "best_feasible"):
        assert math.isfinite(row[k]), (k, row[k])
    # both bounds lie above every attained value (two sound upper bounds: either may be the smaller one when all
    # weight sits on one token and the first-order bound is the trivial max_j W_j)
    assert row["best_feasible"] <= row["exact_lo"] + 1e-12 * row["value_spread"]
    assert row["exact_lo"] <= min(row["exact_hi"], row["first_order"])
    assert row["exact_hi"] - row["exact_lo"] <= 1e-10 * row["value_spread"]
    assert row["status"] == "ok", row["error"]
    assert "exact_status" in COLUMNS and set(COLUMNS) <= set(row) and row["exact_status"] == "ok"


OLD_COLUMNS = ["layer", "head", "prompt", "query_pos", "radius", "norm", "mode", "n_tokens", "nominal",
               "exact_lo", "exact_hi", "value_spread", "best_feasible", "first_order", "second_order",
               "secant_bound", "t_exact_s", "t_first_s", "t_ascent_s", "t_second_s", "solver", "status", "error"]


def test_columns_only_grow_at_the_end():
    assert COLUMNS[:len(OLD_COLUMNS)] == OLD_COLUMNS
    assert COLUMNS[len(OLD_COLUMNS):] == ["exact_status", "second_order_tight", "t_second_tight_s",
                                          "best_feasible_from", "ascent_check", "t_ascent_check_s"]


def _unit(mode, seed=4, **meta):
    p = random_head_problem(np.random.default_rng(seed), d=5, d_head=3, n=4, radius=0.05, mode=mode)
    key = dict(layer=0, head=1, prompt=0, query_pos=3, radius=0.05, norm="linf", mode=mode)
    key.update(meta)
    return dataclasses.replace(p, meta=key)


def test_fixed_query_best_feasible_is_the_exact_witness_and_no_ascent_runs():
    p = _unit("fixed")
    row = certify_unit(p, ascent_restarts=4, ascent_steps=30, ascent_check_fraction=0.0)
    ex = exact_worst_case(p)
    assert row["status"] == "ok" and row["best_feasible_from"] == "exact_witness"
    assert row["best_feasible"] == ex.witness_value == p.value(ex.witness)
    assert row["exact_lo"] == ex.lo <= row["best_feasible"] <= ex.lo + 1e-13 * (1 + ex.value_spread)
    assert math.isnan(row["t_ascent_s"]) and math.isnan(row["ascent_check"])


def test_ascent_cross_check_on_the_sampled_units():
    p = _unit("fixed")
    row = certify_unit(p, ascent_restarts=4, ascent_steps=30, ascent_check_fraction=1.0)
    assert row["status"] == "ok" and math.isfinite(row["t_ascent_check_s"])
    assert row["nominal"] - 1e-12 <= row["ascent_check"] <= row["exact_hi"]
    assert row["best_feasible"] == exact_worst_case(p).witness_value  # the check does not replace the witness


def test_an_ascent_check_above_the_exact_bracket_is_unsound(monkeypatch):
    from attncert.certify import run

    real = run.best_feasible_ascent

    def inflated(problem, **kw):
        res = real(problem, **kw)
        return dataclasses.replace(res, value=res.value + 1.0)

    monkeypatch.setattr(run, "best_feasible_ascent", inflated)
    row = certify_unit(_unit("fixed"), ascent_restarts=2, ascent_steps=10, ascent_check_fraction=1.0)
    assert row["status"] == "UNSOUND" and "exact_hi" in row["error"]


def test_check_sample_is_deterministic_by_unit_and_has_the_requested_share():
    metas = [dict(layer=L, head=h, prompt=p, query_pos=4, radius=r, norm="linf", mode="fixed")
             for L in range(4) for h in range(12) for p in range(5) for r in (0.001, 0.002, 0.005, 0.01, 0.02)]
    picked = [in_check_sample(m, 0.1) for m in metas]
    assert picked == [in_check_sample(m, 0.1) for m in metas]
    assert 0.07 < np.mean(picked) < 0.13
    assert all(in_check_sample(m, 1.0) for m in metas[:5]) and not any(in_check_sample(m, 0.0) for m in metas[:5])
    assert in_check_sample(metas[7], 0.1) == in_check_sample({**metas[7], "mode": "varying"}, 0.1)


def test_varying_query_ascent_is_warm_started_from_the_fixed_query_maximiser():
    p = _unit("varying", seed=7)
    row = certify_unit(p, ascent_restarts=2, ascent_steps=5)
    assert row["status"] == "ok" and row["best_feasible_from"] == "ascent_warm"
    warm = exact_worst_case(dataclasses.replace(p, mode="fixed")).witness
    assert row["best_feasible"] >= p.value(warm) - 1e-12  # never below its warm start (in varying mode)
    assert math.isnan(row["exact_lo"]) and math.isnan(row["t_exact_s"])


def test_precomputed_varying_ascents_give_the_rows_of_the_units_alone():
    problems = [dataclasses.replace(_unit("varying", seed=7), radius=r) for r in (0.01, 0.05, 0.2)]
    kw = dict(ascent_restarts=4, ascent_steps=30, second_order=False)
    for p, pre in zip(problems, varying_ascents(problems, ascent_restarts=4, ascent_steps=30)):
        row, alone = certify_unit(p, ascent=pre, **kw), certify_unit(p, **kw)
        assert row["best_feasible_from"] == alone["best_feasible_from"] == "ascent_warm"
        assert row["best_feasible"] == alone["best_feasible"] and math.isfinite(row["t_ascent_s"])
    with pytest.raises(ValueError, match="varying-query"):
        certify_unit(_unit("fixed"), ascent=pre, **kw)


def test_layer_rows_equal_the_rows_of_each_unit_alone():
    """certify_layer_units batches the varying-query ascents of a unit's radii: every row as certify_unit's alone
    (timing columns aside)."""
    rng = np.random.default_rng(2)
    p = random_head_problem(rng, d=5, d_head=3, n=4, radius=0.05)
    arrays = {k: v[None] for k, v in dict(W_Q=p.W_Q, W_K=p.W_K, W_V=p.W_V, b_Q=p.b_Q, b_K=p.b_K, b_V=p.b_V).items()}
    arrays.update(Z=p.Z0[None], causal=np.array(False))
    spec = p.c[None, None, None]
    units = grid([0], [0], [1], [0.01, 0.05], ["linf"], ["fixed", "varying"], 0)
    kw = dict(ascent_restarts=4, ascent_steps=30, second_order=False, ascent_check_fraction=0.0)
    table, _, _ = certify_layer_units(arrays, spec, [1], units, 0, **kw)
    alone = [certify_unit(head_problem(arrays, spec, [1], u), **kw) for u in units]
    keep = [c for c in COLUMNS if not c.startswith("t_")]
    assert table[keep].equals(type(table)(alone, columns=COLUMNS)[keep])
    assert list(table["best_feasible_from"]) == ["exact_witness"] * 2 + ["ascent_warm"] * 2


def test_legacy_path_runs_the_cold_ascent_everywhere():
    for mode in ("fixed", "varying"):
        row = certify_unit(_unit(mode), ascent_restarts=4, ascent_steps=30, legacy_ascent=True)
        assert row["status"] == "ok" and row["best_feasible_from"] == "ascent" and math.isfinite(row["t_ascent_s"])


def test_varying_tight_number_is_the_smaller_of_the_two_certified_bounds(monkeypatch):
    """Where the tight relaxation's solve ends above the paper-like one (solver tolerance), the varying query's
    tight number is the paper-like one and the stored certificate proves it, as for the fixed query; where it ends
    below, it is its own."""
    import attncert.certify.second_order.certificate as certificate

    real = certificate._solve

    def raised(problem, geo, path, tight, *args, **kwargs):  # the tight solve lands above the paper-like one
        res = real(problem, geo, path, tight, *args, **kwargs)
        return dataclasses.replace(res, value=res.value + 1.0) if tight else res

    p = random_head_problem(np.random.default_rng(3), d=6, d_head=3, n=5, radius=0.05, mode="varying")
    monkeypatch.setattr(certificate, "_solve", raised)
    certs: dict = {}
    row = certify_unit(p, ascent_restarts=2, ascent_steps=20, certificates=certs)
    assert row["second_order_tight"] == row["second_order"]
    kept = certs["second_order_tight"]
    assert kept["kind"] == "dual" and kept["cert"].value <= row["second_order_tight"]
    monkeypatch.setattr(certificate, "_solve", real)
    certs = {}
    row = certify_unit(p, ascent_restarts=2, ascent_steps=20, certificates=certs)
    assert row["second_order_tight"] <= row["second_order"]
