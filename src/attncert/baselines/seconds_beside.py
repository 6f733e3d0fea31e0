"""Seconds per unit of the certificate measured beside the baselines: same units, same process, same minutes.

The paper's timing sentence (CROWN 0.01–0.02 s and α-CROWN 0.2–0.7 s per unit, much faster than the
certificate's 10 s) is an order of speeds. Medians from separate jobs (the certification job's seconds against
the baseline job's) depend on what else the machine ran at the time, and below 10 ms per unit that decides the
order. So the baseline job times the paper-like second-order certificate itself, right after the baselines of
the same units, in the same process (the job hands `bound_layer` the certificate function: this stage does not
import the certification stage): on the units of the first BESIDE_GROUPS (head, prompt, query position,
norm) groups of the fixed query of each layer (every radius of each). Each timed call is the whole certificate
(the reduction, the relaxation, the solve and the dual check) on a fresh `HeadProblem`, so nothing computed for
the baselines is reused. `beside_medians` turns the layer tables' rows into the measured keys: medians over the
same units of each method's seconds and of the certificate's, each with its 95% confidence interval.

The order is judged on the intervals, not on the medians alone: a few milliseconds per unit move with the machine's
load by tens of percent between runs, so two medians a factor 1.5 apart in one run can be 1.4 apart in the next. The
interval of a median over n units is distribution-free (order statistics, `median_interval`):

    [x_(k), x_(n+1-k)],  k the largest integer with  P(Binomial(n, 1/2) <= k - 1) <= 0.025,

which covers the median of the units' time distribution with probability >= 95% whatever that distribution is.
A step of the order (one method slower than the other by more than the claim's factor f) then holds only when
f x (upper end of one) < (lower end of the next): a step at the edge of the tolerance reads as no order, in every
run alike, instead of flipping with the noise.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from collections.abc import Callable

from attncert.head.problem import HeadProblem

#: per layer, how many fixed-query groups (each: every radius of one head, prompt, query position and norm) are timed
BESIDE_GROUPS = 3
#: confidence level of the interval of each median
LEVEL = 0.95
COLUMN = "seconds_certificate_beside"


def certificate_seconds(problems: list[HeadProblem], certificate: Callable[[HeadProblem], object]) -> list[float]:
    """Wall seconds of `certificate` (the paper-like second-order certificate) on each problem, one after the other."""
    out = []
    for p in problems:
        fresh = replace(p, meta=dict(p.meta))  # a new problem: nothing derived for the baselines is reused
        t0 = time.perf_counter()
        certificate(fresh)
        out.append(time.perf_counter() - t0)
    return out


def median_interval(values, level: float = LEVEL) -> list[float] | None:
    """[x_(k), x_(n+1-k)]: the distribution-free `level` confidence interval of the median of n values (order
    statistics; k the largest with P(Binomial(n, 1/2) <= k - 1) <= (1 - level) / 2). Below 6 values not even
    k = 1 reaches 95%: the whole range [min, max] then, which covers with probability 1 - 2^(1-n). None for no
    finite value."""
    x = np.sort(np.asarray([v for v in values if np.isfinite(v)], dtype=float))
    n = len(x)
    if n == 0:
        return None
    tail, k = (1.0 - level) / 2.0, 1

    def cdf(j: int) -> float:  # P(Binomial(n, 1/2) <= j)
        return sum(math.comb(n, i) for i in range(j + 1)) / 2.0 ** n

    while k < (n + 1) // 2 and cdf(k) <= tail:  # k + 1 still keeps the coverage
        k += 1
    return [float(x[k - 1]), float(x[n - k])]


def beside_medians(rows: pd.DataFrame, methods: dict[str, str]) -> dict:
    """{`{key}_seconds_beside`: median seconds per unit of each method in `methods` ({key: method}) over the units
    timed beside the certificate, `cert_seconds_beside`: the certificate's median over the same units,
    `{key}_seconds_beside_ci` / `cert_seconds_beside_ci`: each median's `median_interval`, `seconds_beside_units`:
    how many units}; None values when no unit was timed."""
    if COLUMN not in rows:
        timed = rows.iloc[0:0]
    else:
        timed = rows[rows[COLUMN].notna() & (rows["status"] == "ok")]
    units = timed.drop_duplicates([c for c in ("layer", "head", "prompt", "query_pos", "norm", "mode", "radius")
                                   if c in timed])
    seconds = {key: timed.loc[timed["method"] == m, "seconds"] for key, m in methods.items()}
    out = {f"{key}_seconds_beside": float(np.median(s)) if len(s) else None for key, s in seconds.items()}
    out["cert_seconds_beside"] = float(units[COLUMN].median()) if len(units) else None
    out.update({f"{key}_seconds_beside_ci": median_interval(s) for key, s in seconds.items()})
    out["cert_seconds_beside_ci"] = median_interval(units[COLUMN]) if len(units) else None
    out["seconds_beside_units"] = int(len(units))
    return out
