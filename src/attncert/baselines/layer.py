"""One layer of the baseline stage: every baseline unit bounded by every method, checked for soundness.

A unit's bound is checked against the largest value actually attained on it (the certification
stage's exact witness or best ascent value, `reporting.unit_tables.attained_value`); a bound below it
is recorded as status "UNSOUND: ..." in its row, logged as an error and printed to stderr. It is never
dropped or clipped.
"""
from __future__ import annotations

import itertools
import logging
import sys
from collections.abc import Callable

import numpy as np
import pandas as pd
from tqdm import tqdm

from attncert.baselines.seconds_beside import BESIDE_GROUPS, COLUMN, certificate_seconds
from attncert.baselines.shared_relaxations import head_upper_bounds
from attncert.head.problem import HeadProblem
from attncert.head.units import Unit, head_problem
from attncert.reporting.unit_tables import UNIT_KEYS, attained_value, below_attained

KEYS = UNIT_KEYS + ["radius"]


def attained_by_unit(cert: pd.DataFrame) -> dict:
    """{(unit keys..., radius rounded to 12 digits): attained value} from a certification table."""
    cert = cert.copy()
    cert["radius"] = cert["radius"].round(12)
    return dict(zip(map(tuple, cert[KEYS].itertuples(index=False, name=None)), attained_value(cert)))


def bound_layer(arrays: dict, spec: np.ndarray, qps: list[int], layer: int, grid: dict, methods: list[str],
                attained: dict, alpha: dict | None = None, device: str = "cpu",
                certificate: Callable[[HeadProblem], object] | None = None) -> pd.DataFrame:
    """Rows (unit keys, method, upper, attained, seconds, status, label, seconds_certificate_beside) for the grid of
    one layer. The last column is the seconds of `certificate` (the job passes the paper-like second-order
    certificate) on the same unit, timed in this process right after the baselines, for the first
    `seconds_beside.BESIDE_GROUPS` fixed-query groups (NaN elsewhere, and everywhere without `certificate`).

    grid: heads, prompts, query_positions, norms, modes, radii (lists). All radii of one head and
    method are bounded in one call of `baseline_upper_bounds`, the methods of one head from shared work
    (`shared_relaxations.head_upper_bounds`: the same bounds bit for bit). alpha: its alpha-CROWN keyword
    arguments (alpha_iterations, alpha_tolerance, alpha_patience, alpha_lr, alpha_betas; config
    baselines.alpha_*); device:
    the torch device (config key `device`).
    """
    alpha = dict(alpha or {})
    rows = []
    groups = list(itertools.product(grid["heads"], grid["prompts"], grid["query_positions"], grid["norms"],
                                    grid["modes"]))
    timed_groups = 0
    for h, pr, qp, norm, mode in tqdm(groups, desc=f"baselines layer {layer}", file=sys.stderr, mininterval=5):
        units = [Unit(layer, h, pr, qp, float(r), norm, mode) for r in grid["radii"]]
        problems = [head_problem(arrays, spec, qps, u) for u in units]
        first = len(rows)
        bounds = head_upper_bounds(problems, methods, device=device, **alpha)  # shared work, same bounds
        for method in methods:
            for u, res in zip(units, bounds[method]):
                ref = attained.get((u.layer, u.head, u.prompt, u.query_pos, u.norm, u.mode, round(u.radius, 12)),
                                   np.nan)
                status = res.status
                if status == "ok" and below_attained(res.upper, ref):
                    status = f"UNSOUND: upper {res.upper!r} < attained {ref!r}"
                    logging.error("%s %s %s", u, method, status)
                    print(f"attncert: SOUNDNESS VIOLATION {u} {method}: {status}", file=sys.stderr)
                if status != "ok" and not status.startswith("UNSOUND"):
                    logging.warning("%s %s: no bound (%s)", u, method, status)
                rows.append({**u.key(), "method": method, "upper": res.upper, "attained": ref,
                             "seconds": res.seconds, "status": status, "label": res.label, COLUMN: np.nan})
        if certificate is not None and mode == "fixed" and timed_groups < BESIDE_GROUPS:
            timed_groups += 1
            beside = dict(zip((u.radius for u in units), certificate_seconds(problems, certificate)))
            for row in rows[first:]:
                row[COLUMN] = beside[row["radius"]]
    return pd.DataFrame(rows)
