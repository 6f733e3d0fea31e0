"""The baseline comparison: ratios to the certificate on the same unit, and soundness rows never dropped."""
import numpy as np
import pandas as pd

from attncert.baselines.comparison import comparison_table, merge
from attncert.baselines.layer import attained_by_unit, bound_layer

KEY = {"layer": 0, "head": 0, "prompt": 0, "query_pos": 2, "norm": "linf", "mode": "fixed"}


def _cert():
    return pd.DataFrame([{**KEY, "radius": r, "nominal": 0.0, "exact_lo": 10 * r, "exact_hi": 10 * r,
                          "best_feasible": 9 * r, "first_order": 13 * r, "second_order": 10 * r + 2 * r * r,
                          "t_second_s": 0.1} for r in (0.01, 0.02)])


def test_ratio_is_baseline_gap_over_certificate_gap_on_the_same_unit():
    base = pd.DataFrame([{**KEY, "radius": r, "method": "crown", "upper": 10 * r + 8 * r * r, "seconds": 0.01,
                          "status": "ok", "label": "CROWN"} for r in (0.01, 0.02)])
    m = merge(base, _cert())
    assert np.allclose(m["ratio_to_certificate"], 4.0) and np.allclose(m["rel_gap"], 0.8 * m["radius"])
    t = comparison_table(m, "tiny")
    assert len(t) == 2 and np.allclose(t["ratio_median"], 4.0) and (t["share_certificate_tighter"] == 1.0).all()


def _random_layer(seed: int, heads: int, T: int = 3, d: int = 4, dh: int = 2):
    """A random extracted layer (the arrays `bound_layer` reads) and a unit specification vector per head."""
    rng = np.random.default_rng(seed)
    arrays = {"W_Q": rng.standard_normal((heads, d, dh)), "W_K": rng.standard_normal((heads, d, dh)),
              "W_V": rng.standard_normal((heads, d, dh)), "b_Q": np.zeros((heads, dh)), "b_K": np.zeros((heads, dh)),
              "b_V": np.zeros((heads, dh)), "Z": rng.standard_normal((1, T, d)), "causal": np.bool_(True)}
    return arrays, np.ones((heads, 1, 1, dh)) / np.sqrt(dh)


def test_bound_layer_marks_a_bound_below_the_attained_value_unsound():
    arrays, spec = _random_layer(seed=0, heads=1)
    grid = {"heads": [0], "prompts": [0], "query_positions": [2], "norms": ["linf"], "modes": ["fixed"],
            "radii": [0.01, 0.02]}
    cert = pd.DataFrame([{**KEY, "radius": r, "exact_lo": 1e6 if r == 0.02 else -1e6, "best_feasible": np.nan}
                         for r in (0.01, 0.02)])
    df = bound_layer(arrays, spec, [2], 0, grid, ["ibp"], attained_by_unit(cert))
    assert len(df) == 2  # every unit keeps its row
    status = dict(zip(df["radius"], df["status"]))
    assert status[0.01] == "ok" and status[0.02].startswith("UNSOUND")


def test_the_certificate_is_timed_beside_the_baselines_of_the_first_fixed_groups(monkeypatch):
    """The first BESIDE_GROUPS fixed-query groups of a layer (here 1) get the certificate's seconds, measured in the
    same call; the other groups do not; `beside_medians` reads medians over the same units, and their intervals."""
    import attncert.baselines.layer as layer_module
    from attncert.baselines.seconds_beside import COLUMN, beside_medians, median_interval
    from attncert.certify.second_order.certificate import second_order_certificate

    monkeypatch.setattr(layer_module, "BESIDE_GROUPS", 1)
    arrays, spec = _random_layer(seed=1, heads=2)
    grid = {"heads": [0, 1], "prompts": [0], "query_positions": [2], "norms": ["linf"], "modes": ["varying", "fixed"],
            "radii": [0.01, 0.02]}
    df = bound_layer(arrays, spec, [2], 0, grid, ["ibp", "crown"], {}, certificate=second_order_certificate)
    timed = df[df[COLUMN].notna()]
    assert set(timed["mode"]) == {"fixed"} and set(timed["head"]) == {0} and len(timed) == 2 * 2  # radii x methods
    assert (timed[COLUMN] > 0).all()
    per_unit = timed.groupby("radius")[COLUMN].nunique()
    assert (per_unit == 1).all()  # one certificate time per unit, shared by its methods' rows
    got = beside_medians(df.assign(status="ok"), {"crown": "crown", "ibp": "ibp"})
    assert got["seconds_beside_units"] == 2
    assert got["cert_seconds_beside"] == timed.drop_duplicates("radius")[COLUMN].median()
    assert got["crown_seconds_beside"] == timed.loc[timed["method"] == "crown", "seconds"].median()
    assert got["crown_seconds_beside_ci"] == median_interval(timed.loc[timed["method"] == "crown", "seconds"])
    assert got["cert_seconds_beside_ci"] == sorted(timed.drop_duplicates("radius")[COLUMN])  # 2 units: the range
    assert beside_medians(df.drop(columns=[COLUMN]), {"crown": "crown"})["cert_seconds_beside"] is None
    without = bound_layer(arrays, spec, [2], 0, grid, ["ibp"], {})
    assert without[COLUMN].isna().all()


def test_the_median_interval_is_the_order_statistic_confidence_interval():
    """[x_(k), x_(n+1-k)] with the largest k keeping 95% (k = 7 for 24 values, the textbook table); the whole range
    below 6 values; it covers the median of a skewed distribution in >= 95% of samples."""
    from attncert.baselines.seconds_beside import median_interval

    assert median_interval(range(1, 25)) == [7.0, 18.0]
    assert median_interval(range(1, 73)) == [28.0, 45.0]
    assert median_interval([3.0, 1.0, 2.0]) == [1.0, 3.0] and median_interval([5.0]) == [5.0, 5.0]
    assert median_interval([np.nan, 2.0, 1.0]) == [1.0, 2.0] and median_interval([]) is None
    rng = np.random.default_rng(0)
    samples = rng.exponential(size=(4000, 24))
    hits = sum(lo <= np.log(2.0) <= hi for lo, hi in map(median_interval, samples))
    assert 0.95 <= hits / len(samples) <= 0.99
