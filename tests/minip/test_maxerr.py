"""The paper's metric (largest |y - t|), transition ranks per criterion, and the measured values."""
import math

import numpy as np
import pandas as pd
import pytest

from attncert.minip.measured import maxerr_measurements, paper_measurements
from attncert.minip.sweep import MAX_ERR_CRITERION, collect, criterion_transitions
from attncert.minip.tables import threshold_table, witness_maxerr_table
from attncert.minip.task import max_abs_error
from attncert.minip.training import evaluate_witness
from attncert.minip.witness import witness_family

BOUND = {"bound": 8, "bits": 24, "n_queries": 10, "family_size": 190, "gap": 6, "frobenius": 8,
         "dominant": 6, "min_ratio": 5, "bound_position_dependent": None,
         "both_orders": {"family_size": 280, "bound": 8, "bound_position_dependent": 8}}


def test_max_abs_error():
    t = np.array([[0, 6, 6], [6, 6, 6]])
    assert max_abs_error(t + 0.0, t) == 0.0
    y = t + np.array([[0.1, -2.5, 0.0], [0.0, 0.3, 0.0]])
    assert max_abs_error(y, t) == pytest.approx(2.5)
    y[1, 1] = np.nan
    assert math.isinf(max_abs_error(y, t))


def test_evaluate_witness_reports_the_largest_deviation():
    fam = witness_family(24, 10)
    pred = fam.targets.astype(float)
    pred[5, 2] += 3.9    # far off at a code-word position
    pred[7, 0] -= 0.45   # a query position, still right
    r = evaluate_witness(pred, fam)
    assert r["max_abs_error"] == pytest.approx(3.9)
    assert r["max_abs_error_query_position"] == pytest.approx(0.45)
    assert r["error"] == pytest.approx(1 / (3 * fam.size)) and r["fraction_queries_failed"] == 0.0


def _runs():
    recs = []
    # witness: ranks 2, 8, 10, 32; the largest deviation per (rank, seed)
    maxerr = {2: (2.0, 3.9), 8: (1.7, 2.0), 10: (0.9, 0.3), 32: (0.1, 0.08)}
    for rank, devs in maxerr.items():
        for seed, dev in enumerate(devs):
            recs.append(dict(setting="witness", bits=24, length=3, kind="kernel", rank=rank, seed=seed,
                             error=0.0 if dev < 0.5 else 0.03, error_query_position=0.0, max_abs_error=dev,
                             max_abs_error_query_position=dev / 2, fraction_queries_failed=0.5, queries_failed=5))
    for seed in (0, 1):
        recs.append(dict(setting="witness", bits=24, length=3, kind="dense", rank=None, seed=seed, error=0.0,
                         max_abs_error=0.02 + seed / 100, max_abs_error_query_position=0.01))
    # random tokens N = 3: share wrong and largest deviation per rank (same for both seeds)
    grid = {8: {1: (0.2, 3.0), 4: (0.08, 2.0), 8: (0.03, 1.0), 16: (0.004, 0.7), 32: (0.0, 0.3)},
            12: {1: (0.3, 3.0), 4: (0.15, 2.0), 8: (0.09, 1.5), 16: (0.02, 1.1), 32: (0.012, 0.9)}}
    for m, by_rank in grid.items():
        for seed, dev in enumerate((0.2, m / 48)):
            recs.append(dict(setting=f"m{m}-n3", bits=m, length=3, kind="dense", rank=None, seed=seed, error_iid=0.0,
                             error_ood=0.0, max_abs_error_iid=dev, max_abs_error_ood=dev))
        for rank, (err, dev) in by_rank.items():
            for seed in (0, 1):
                recs.append(dict(setting=f"m{m}-n3", bits=m, length=3, kind="kernel", rank=rank, seed=seed,
                                 error_iid=err / 2, error_ood=err, max_abs_error_iid=dev / 2, max_abs_error_ood=dev))
    return collect(recs)


def test_criterion_transitions_and_table():
    df = _runs()
    c = criterion_transitions(df, [0.01, 0.05, 0.1]).set_index(["bits", "split"])
    assert [c.loc[(8, "ood"), k] for k in ("error < 0.01", "error < 0.05", "error < 0.1", MAX_ERR_CRITERION)] == [
        16,
        8,
        4,
        32,
    ]
    assert [c.loc[(12, "ood"), k] for k in ("error < 0.01", "error < 0.05", "error < 0.1")] == [None, 16, 8]
    assert c.loc[(12, "ood"), MAX_ERR_CRITERION] is None and c.loc[(12, "ood"), "max_rank"] == 32
    assert c.loc[(8, "iid"), "error < 0.01"] == 16 and c.loc[(12, "iid"), MAX_ERR_CRITERION] == 32
    t = threshold_table(df, [0.01, 0.05, 0.1])
    row = t[(t.bits == 12) & (t.split == "ood")].iloc[0]
    assert row["error < 0.01"] == ">32" and row[MAX_ERR_CRITERION] == ">32" and row["error < 0.05"] == "16"
    assert row["dense_max_abs_err"] == 0.25


def test_witness_maxerr_table():
    w = witness_maxerr_table(_runs(), BOUND).set_index("rank", drop=False)
    assert list(w["rank"].iloc[:4]) == [2, 8, 10, 32] and w["model"].iloc[-1] == "dense softmax"
    assert w.loc[2, "max_abs_err_min"] == 2.0 and w.loc[2, "max_abs_err_max"] == 3.9 and w.loc[2, "vs_bound"] == "below"
    assert w.loc[10, "seeds_solved"] == 1 and w.loc[32, "seeds_solved"] == 2
    assert w.loc[2, "max_abs_err_query_max"] == pytest.approx(1.95)


def test_measured_values_in_the_papers_metric():
    df = _runs()
    cons = pd.DataFrame([{"construction": "witness rank S+1", "rank": 11, "max_abs_error": 1e-4},
                         {"construction": "witness rank S", "rank": 10, "max_abs_error": 0.003},
                         {"construction": "rank-1 kernel", "rank": 1, "max_abs_error": 0.0}])
    v = maxerr_measurements(df, BOUND, cons, [0.01, 0.05, 0.1])
    assert v["witness_max_abs_err_below_bound"] == 2.0          # only rank 2 is below the bound 8
    assert v["witness_max_abs_err_query_below_bound"] == 1.0
    assert v["witness_max_abs_err_at_r8"] == 2.0 and v["witness_max_abs_err_at_r32"] == 0.1
    assert v["witness_max_abs_err_dense"] == pytest.approx(0.03)
    assert v["witness_solve_at_every_seed"] == 32
    assert v["witness_min_rank_bracket"] == [8, 10]
    assert v["witness_bound_position_dependent"] is None and v["witness_bound_position_dependent_both_orders"] == 8
    assert v["ood_transition_sizes"] == [8, 12]
    assert v["ood_transition_ranks_at_1pct"] == [16, None] and v["ood_transition_ranks_at_5pct"] == [8, 16]
    assert v["ood_transition_ranks_at_10pct"] == [4, 8]
    assert v["ood_transition_ranks_max_abs_err_half"] == [32, None] and v["ood_transition_max_rank"] == 32
    assert v["ood_dense_max_abs_err"] == [0.2, 0.25]
    p = paper_measurements(df, BOUND, 0.05)
    assert p["witness_solve_at"] == 10  # some seed has largest |y - t| < 1/2 from rank 10
