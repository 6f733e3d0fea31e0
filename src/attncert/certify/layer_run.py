"""Certify every unit of one layer: the rows of `data/certify/{model}/layer{L}.csv` and their certificates.

`certify_layer_units` runs `run.certify_unit` on each unit of the grid (progress with tqdm; a row that is not
"ok" is logged, a soundness violation loudly) and collects the certificates of each row for
`certificate_store.write_certificates`. The varying-query units that differ only in their radius have their
warm-started ascents run as one batch (`certify_in_radius_batches`, also used by the long-context stage) when the
first of them comes up; each unit's row is the one it would get alone. Their warm starts are the exact solves of the
fixed-query units of the same radii (earlier in the grid), reused rather than solved again: the same witnesses.
"""
from __future__ import annotations

import dataclasses
import logging
import sys

import pandas as pd
from tqdm import tqdm

from attncert.certify.certificate_store import RowPool, flatten
from attncert.certify.best_feasible_ascent import same_head
from attncert.certify.run import certify_unit, varying_ascents
from attncert.certify.unit_columns import COLUMNS
from attncert.head.units import head_problem


def certify_in_radius_batches(items, *, desc: str, **unit_kw):
    """Yield (index, row, certificates) of `run.certify_unit` on each problem of `items`, in order.

    items: (group, problem) pairs; `group` (hashable) names the head and unit without the radius and the query mode.
    The varying-query problems of one group are units that differ only in their radius: their warm-started ascents
    run as one batch (`run.varying_ascents`) when the first of them comes up, each warm-started from the exact solve
    of the fixed-query problem of its group and radius when that came earlier (reused, not solved again: the same
    witness). unit_kw go to `certify_unit`; with `legacy_ascent` nothing is batched."""
    batched = not unit_kw.get("legacy_ascent", False)
    ascent_kw = {k: unit_kw[k] for k in ("ascent_restarts", "ascent_steps", "seed", "device") if k in unit_kw}
    members: dict = {}
    for i, (group, problem) in enumerate(items):
        if batched and problem.mode == "varying":
            members.setdefault(group, []).append(i)
    warm_for = {(g, items[i][1].radius) for g, idx in members.items() for i in idx}  # fixed solves to keep
    solved: dict = {}  # (group, radius) -> (fixed problem, exact result), until its varying unit's batch takes it
    ascents, started = {}, set()
    for i, (group, problem) in enumerate(tqdm(items, desc=desc, file=sys.stderr, mininterval=5)):
        if problem.mode == "varying" and group in members and i not in started:
            batch = [j for j in members[group] if j not in started]
            started.update(batch)
            problems = [dataclasses.replace(items[j][1], meta=dict(items[j][1].meta)) for j in batch]  # own copies
            fixed = [_fixed_exact(solved.pop((group, p.radius), None), p) for p in problems]
            ascents.update(zip(batch, varying_ascents(problems, fixed_exact=fixed, **ascent_kw)))
        certificates: dict = {}
        exact: list | None = [] if problem.mode == "fixed" and (group, problem.radius) in warm_for else None
        row = certify_unit(problem, certificates=certificates, ascent=ascents.pop(i, None), exact_out=exact,
                           **unit_kw)
        if exact:
            solved[(group, problem.radius)] = (problem, exact[0])
        yield i, row, certificates


def _fixed_exact(hit, problem):
    """The exact result of a fixed-query solve `hit` = (fixed problem, result) if it was solved for the very same
    problem as `problem` (varying) with mode "fixed"; else None."""
    if hit is None:
        return None
    fixed, res = hit
    same = same_head(fixed, dataclasses.replace(problem, mode="fixed")) and fixed.radius == problem.radius
    return res if same else None


def certify_layer_units(arrays: dict, spec, query_positions, units, layer: int, **unit_kw):
    """(table, certificate entries, row pool) of the units; unit_kw go to `certify_unit`."""
    rows, entries, pool = [], {}, RowPool()
    items = [((u.layer, u.head, u.prompt, u.query_pos, u.norm), head_problem(arrays, spec, query_positions, u))
             for u in units]
    for i, row, certificates in certify_in_radius_batches(items, desc=f"certify layer {layer}", **unit_kw):
        unit = units[i]
        if row["status"] != "ok":
            level = logging.ERROR if row["status"] in ("UNSOUND", "error") else logging.WARNING
            logging.log(level, "%s %s: %s", row["status"], unit, row["error"])
            if row["status"] == "UNSOUND":
                print(f"attncert: SOUNDNESS VIOLATION {unit}: {row['error']}", file=sys.stderr)
        entries.update(flatten(len(rows), unit.key(), certificates, pool))
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS), entries, pool
