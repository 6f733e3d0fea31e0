"""The Min-IP tables in words (minip_*.md): each column's header and definition, one mapping for the stage's tables
(a column name means the same in every table it appears in). `column(name)` also words the criterion columns of
minip_thresholds ("error < p", "max|y-t| < 1/2"). The CSV files keep the machine names.

Terms (docs/minip.md): y is the head's output at a position, t its target; a position is *wrong* when |y − t| ≥ 1/2;
*error* is the share of positions wrong; the *rank* is the number of nonnegative features of kernel attention.
"""
from __future__ import annotations

import re

from attncert.reporting.table_legend import Column

COLUMNS = {
    # constructions
    "construction": Column("construction", "the attention built by hand (docs/minip.md)"),
    "guarantee": Column("guarantee", "what the construction is proven to achieve on the family"),
    "m": Column("bits m", "tokens are vectors in {0,1}^m"),
    "N": Column("length N", "tokens per sequence"),
    "sequences": Column("sequences", "inputs checked (every sequence of the family)"),
    "max_abs_error": Column("largest |y − t|", "largest deviation over every position of every sequence"),
    "error": Column("share wrong", "share of positions with |y − t| ≥ 1/2"),
    "max_abs_diff_to_dense": Column("largest |y − dense softmax|",
                                    "largest difference to dense softmax attention's output (empty: not compared)"),
    # witness suite
    "model": Column("attention", "kernel: nonnegative kernel attention of the given rank; dense softmax: the "
                                 "reference"),
    "rank": Column("feature rank", "nonnegative features of kernel attention (empty for dense softmax)"),
    "vs_bound": Column("rank vs the proven bound", "below the bound, at or above it up to 2×, or above 2×"),
    "seeds": Column("seeds", "training seeds"),
    "seeds_zero_error": Column("seeds with no wrong position", "seeds whose model gets every position right"),
    "seeds_solved": Column("seeds that solve the suite", "seeds whose largest |y − t| is < 1/2"),
    "error_min": Column("share wrong, min over seeds", "smallest share of wrong positions over seeds"),
    "error_median": Column("share wrong, median over seeds", "median share of wrong positions over seeds"),
    "error_max": Column("share wrong, max over seeds", "largest share of wrong positions over seeds"),
    "query_error_min": Column("share wrong at the query position, min over seeds",
                              "smallest share of wrong query positions over seeds"),
    "queries_failed_frac_min": Column("share of queries failed, min over seeds",
                                      "a query fails if some input (q_s, ., .) is wrong at the query position"),
    "queries_failed_frac_max": Column("share of queries failed, max over seeds", "the same, largest over seeds"),
    "errors_by_seed": Column("share wrong per seed", "one value per seed, in seed order"),
    "max_abs_err_min": Column("largest |y − t|, min over seeds",
                              "the paper's metric (largest deviation over the suite), smallest over seeds"),
    "max_abs_err_median": Column("largest |y − t|, median over seeds", "the same, median over seeds"),
    "max_abs_err_max": Column("largest |y − t|, max over seeds", "the same, largest over seeds"),
    "max_abs_err_query_min": Column("largest |y − t| at the query position, min over seeds",
                                    "the deviation at the query position only, smallest over seeds"),
    "max_abs_err_query_max": Column("largest |y − t| at the query position, max over seeds",
                                    "the same, largest over seeds"),
    "max_abs_err_by_seed": Column("largest |y − t| per seed", "one value per seed, in seed order"),
    "share_wrong_median": Column("share wrong, median over seeds", "median share of positions with |y − t| ≥ 1/2"),
    # transition ranks
    "bits": Column("bits m", "tokens are random vectors in {0,1}^m (the problem size)"),
    "length": Column("length N", "tokens per sequence"),
    "split": Column("test split", "iid: test tokens from the training pool; ood: from the disjoint test pool"),
    "max_rank": Column("largest rank of the grid", "the largest feature rank trained"),
    "transition_rank_iid": Column("transition rank, iid",
                                  "smallest rank whose median error over seeds is below the threshold, iid test "
                                  "('>R': not reached up to the largest rank R)"),
    "min_median_error_iid": Column("smallest median error, iid", "the smallest median error over the grid's ranks"),
    "transition_rank_ood": Column("transition rank, ood", "the same on the out-of-distribution test split"),
    "min_median_error_ood": Column("smallest median error, ood", "the same on the out-of-distribution test split"),
    "dense_max_error_ood": Column("dense softmax, largest error (ood)", "largest share wrong over dense seeds, ood"),
    "dense_max_error_iid": Column("dense softmax, largest error (iid)", "largest share wrong over dense seeds, iid"),
    "dense_seeds": Column("dense softmax seeds", "seeds of dense softmax attention"),
    "dense_max_abs_err": Column("dense softmax, largest |y − t|",
                                "largest deviation of dense softmax attention on the same test sequences, worst seed"),
    # the paper's numbers
    "quantity": Column("quantity", "what is compared"),
    "paper": Column("paper", "Paper B's value (data/paper_claims.yaml, paper_b)"),
    "ours": Column("ours", "this run's value"),
    "note": Column("note", "how ours is measured"),
}


def column(name: str) -> Column:
    """The wording of a Min-IP column, including the criterion columns of the threshold table."""
    if name in COLUMNS:
        return COLUMNS[name]
    if m := re.fullmatch(r"error < ([0-9.e-]+)", name):
        return Column(f"transition rank, share wrong < {m.group(1)}",
                      f"smallest rank whose median share of wrong positions over seeds is below {m.group(1)} ('>R': "
                      "not reached up to the largest rank R)")
    if name.startswith("max|y-t|"):
        return Column("transition rank, largest |y − t| < 1/2",
                      "smallest rank whose median largest deviation over seeds is below 1/2 (nothing wrong)")
    raise KeyError(f"no wording for the Min-IP column {name!r}: add it to minip.table_legend.COLUMNS")
