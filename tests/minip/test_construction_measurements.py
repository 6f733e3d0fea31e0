"""The §3 construction claims read off the real exhaustive checks (no fixtures standing in for them)."""
import pandas as pd
import pytest

from attncert.minip.constructions import construction_checks
from attncert.minip.measured import construction_measurements, lower_bound_holds


@pytest.fixture(scope="module")
def checks():
    return pd.DataFrame(construction_checks(3, 2.0))


def test_construction_claims_come_out_as_the_theorems_say(checks):
    m = construction_measurements(checks, {"bits": 24})
    assert m["rank1_max_abs_err_n_le_2"] <= 1e-9          # rank 1 is exact for N <= 2
    assert m["rank1_max_abs_err_n3"] >= 0.5                # and hits the wall at N = 3 (m = 3: |y - t| = 1)
    assert m["dense_softmax_max_abs_err_n3"] < 0.5         # dense softmax solves N = 3
    assert m["positive_feature_max_abs_diff_to_dense"] <= 1e-9
    assert m["witness_bits"] == 24


def test_a_broken_construction_row_shows_in_the_value(checks):
    bad = checks.copy()
    i = bad.index[(bad["construction"] == "rank-1 kernel") & (bad["N"] == 2)][0]
    bad.loc[i, "max_abs_error"] = 0.4
    assert construction_measurements(bad, {"bits": 24})["rank1_max_abs_err_n_le_2"] == 0.4


def test_none_solved_below_bound_uses_the_largest_deviation():
    runs = pd.DataFrame({"setting": "witness", "kind": ["kernel", "kernel", "kernel", "dense"], "rank": [4, 7, 16, 0],
                         "error": [0.1, 0.0, 0.0, 0.0], "max_abs_error": [2.0, 0.6, 0.2, 0.01]})
    bound = {"bound": 8}
    assert lower_bound_holds(runs, bound) is True  # rank 7 is right by share-wrong (error 0) but not by |y - t| < 1/2
    runs.loc[1, "max_abs_error"] = 0.3  # a rank-7 run with every |y - t| < 1/2 would contradict the theorem
    assert lower_bound_holds(runs, bound) is False
    assert lower_bound_holds(runs[runs["rank"] >= 8], bound) is None
