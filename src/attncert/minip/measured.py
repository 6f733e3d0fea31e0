"""The Min-IP values that `paper_vs_reproduced` compares with data/paper_claims.yaml (section paper_b).

`paper_measurements` keeps the original claim ids (share-wrong based where the claim was first
read that way); `maxerr_measurements` adds the same questions in the paper's own metric, the largest
deviation max |y - t| over a suite (solved iff < 1/2), and the random-token transition rank under
each criterion, so the verdict can be judged in the claim's metric and its threshold sensitivity seen.
"""
from __future__ import annotations

import math

import pandas as pd

from .sweep import MAX_ERR_CRITERION, criterion_label, criterion_transitions, scaling_transitions, witness_transition
from .task import HALF


def _pct_key(p: float) -> str:
    return f"{100 * p:g}pct"


def maxerr_measurements(runs: pd.DataFrame, bound: dict, constructions: pd.DataFrame, thresholds: list[float]) -> dict:
    """The Min-IP values in the paper's own metric (largest |y - t|) and per transition criterion.

    witness_max_abs_err_below_bound        min over ranks < bound and seeds of the largest |y - t| over the suite
    witness_max_abs_err_query_below_bound  the same at the query position only
    witness_max_abs_err_at_r{r}            max over seeds of the largest |y - t| at kernel rank r (every seed is within
    it)
    witness_max_abs_err_dense              max over seeds, dense softmax
    witness_solve_at_every_seed            smallest rank where every seed has largest |y - t| < 1/2
    witness_min_rank_bracket               [proven bound, smallest rank of a construction with max |y - t| < 1/2]
    witness_bound_position_dependent       the bound also valid for position-dependent maps (None: not covered)
    witness_bound_position_dependent_both_orders   the same for the family with both key orders
    ood_transition_sizes                   problem sizes m of the N = 3 random-token grid, in order
    ood_transition_ranks_at_{p}pct         per size: smallest rank with median OOD error < p (None: not reached)
    ood_transition_ranks_max_abs_err_half  per size: smallest rank with median OOD largest |y - t| < 1/2
    ood_transition_max_rank                largest rank of the grid (None entries are above it)
    ood_dense_max_abs_err                  per size: largest OOD |y - t| of dense softmax, worst seed
    """
    w = runs[(runs.setting == "witness") & (runs.kind == "kernel")]
    below = w[w["rank"] < bound["bound"]]
    dense = runs[(runs.setting == "witness") & (runs.kind == "dense")]
    solving = constructions[
        constructions["construction"].str.startswith("witness") & (constructions["max_abs_error"] < HALF)
    ]
    out = {
        "witness_max_abs_err_below_bound": float(below["max_abs_error"].min()) if len(below) else None,
        "witness_max_abs_err_query_below_bound": float(below["max_abs_error_query_position"].min())
        if len(below)
        else None,
        **{f"witness_max_abs_err_at_r{int(r)}": float(g.max()) for r, g in w.groupby("rank")["max_abs_error"]},
        "witness_max_abs_err_dense": float(dense["max_abs_error"].max()) if len(dense) else None,
        "witness_solve_at_every_seed": witness_transition(runs)["every_seed_zero"],
        "witness_min_rank_bracket": [int(bound["bound"]), int(solving["rank"].min()) if len(solving) else None],
        "witness_bound_position_dependent": bound.get("bound_position_dependent"),
        "witness_bound_position_dependent_both_orders": (bound.get("both_orders") or {}).get(
            "bound_position_dependent"
        ),
    }
    crit = criterion_transitions(runs, thresholds)
    c = crit[(crit.length == 3) & (crit.split == "ood")].sort_values("bits")
    as_list = lambda col: [None if v is None or pd.isna(v) else int(v) for v in c[col]]  # noqa: E731
    out["ood_transition_sizes"] = [int(b) for b in c["bits"]]
    for p in thresholds:
        out[f"ood_transition_ranks_at_{_pct_key(p)}"] = as_list(criterion_label(p))
    out["ood_transition_ranks_max_abs_err_half"] = as_list(MAX_ERR_CRITERION)
    out["ood_transition_max_rank"] = int(c["max_rank"].max()) if len(c) else None
    dense = runs[(runs.kind == "dense") & (runs.setting != "witness") & (runs.length == 3)]
    out["ood_dense_max_abs_err"] = [
        float(dense.loc[dense.bits == b, "max_abs_error_ood"].max()) for b in out["ood_transition_sizes"]
    ]
    return out


def construction_measurements(constructions: pd.DataFrame, bound: dict) -> dict:
    """The §3 constructions' claims, from the exhaustive check (every sequence of length N over {0,1}^m).

    rank1_max_abs_err_n_le_2               max over m and N <= 2 of the rank-1 head's largest |y - t| (exact: 0)
    rank1_max_abs_err_n3                   max over m of the rank-1 head's largest |y - t| at N = 3 (the wall: >= 1/2)
    dense_softmax_max_abs_err_n3           max over m of dense softmax's largest |y - t| at N = 3 (solves: < 1/2)
    positive_feature_max_abs_diff_to_dense max over m of |y(2^m-feature kernel head) - y(dense softmax)|
    witness_bits                           bits per token of the witness suite
    """
    c = constructions
    rank1 = c[c["construction"] == "rank-1 kernel"]
    dense = c[c["construction"].str.startswith("dense softmax")]
    features = c[c["construction"].str.contains("positive features")]
    top = lambda rows, col: float(rows[col].max()) if len(rows) else None  # noqa: E731
    return {
        "rank1_max_abs_err_n_le_2": top(rank1[rank1["N"] <= 2], "max_abs_error"),
        "rank1_max_abs_err_n3": top(rank1[rank1["N"] == 3], "max_abs_error"),
        "dense_softmax_max_abs_err_n3": top(dense[dense["N"] == 3], "max_abs_error"),
        "positive_feature_max_abs_diff_to_dense": top(features[features["N"] == 3], "max_abs_diff_to_dense"),
        "witness_bits": int(bound["bits"]),
    }


def lower_bound_holds(runs: pd.DataFrame, bound: dict) -> bool | None:
    """The theorem's criterion on the trained heads: no kernel run of rank below the proven bound has every
    |y - t| < 1/2 on the witness suite (None when no such run exists)."""
    w = runs[(runs.setting == "witness") & (runs.kind == "kernel")]
    below = w[w["rank"] < bound["bound"]]
    return bool((below["max_abs_error"] >= HALF).all()) if len(below) else None


def paper_measurements(runs: pd.DataFrame, bound: dict, threshold: float) -> dict:
    """Our values for the paper_b claim ids of data/paper_claims.yaml."""
    w = runs[(runs.setting == "witness") & (runs.kind == "kernel")]
    below = w[w["rank"] < bound["bound"]]
    wt = witness_transition(runs)
    t3 = scaling_transitions(runs, threshold)
    t3 = t3[t3.length == 3].sort_values("bits")
    big = 10 ** 9  # "not reached up to the largest rank" sorts above every rank
    ranks = [
        big if (v is None or (isinstance(v, float) and math.isnan(v))) else int(v) for v in t3["transition_rank_ood"]
    ]
    dense = runs[runs.kind == "dense"]
    dense_ok = dense.apply(lambda r: (r["error"] if r["setting"] == "witness" else r["error_ood"]) < threshold, axis=1)
    return {
        "witness_suite_size": int(bound["family_size"]),
        "witness_fail_below": bool(len(below) > 0 and (below["error"] > 0).all()),
        "witness_none_solved_below_bound": lower_bound_holds(runs, bound),
        "witness_solve_at": wt["some_seed_zero"],
        "witness_bound": int(bound["bound"]),
        "ood_transition": bool(
            len(ranks) >= 2 and all(a <= b for a, b in zip(ranks, ranks[1:])) and ranks[-1] > ranks[0]
        ),
        "dense_accurate": float(dense_ok.mean()) if len(dense) else None,
    }
