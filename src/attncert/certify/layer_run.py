"""Certify every unit of one layer: the rows of `data/certify/{model}/layer{L}.csv` and their certificates.

`certify_layer_units` runs `run.certify_unit` on each unit of the grid (progress with tqdm; a row that is not
"ok" is logged, a soundness violation loudly) and collects the certificates of each row for
`certificate_store.write_certificates`. The varying-query units that differ only in their radius have their
warm-started ascents run as one batch (`run.varying_ascents`) when the first of them comes up; each unit's row is
the one it would get alone. Their warm starts are the exact solves of the fixed-query units of the same radii
(earlier in the grid), reused rather than solved again: the same witnesses.
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


def _radius_groups(units) -> dict:
    """{unit: the varying-query units that differ from it only in the radius (itself included), in grid order}."""
    groups: dict = {}
    for u in units:
        if u.mode == "varying":
            groups.setdefault((u.layer, u.head, u.prompt, u.query_pos, u.norm), []).append(u)
    return {u: members for members in groups.values() for u in members}


def _fixed_exact(solved: dict, unit, problem):
    """The exact result of the fixed-query unit that is `unit` (varying) with mode "fixed", if it was solved for the
    very same problem (None otherwise); taken out of `solved`."""
    hit = solved.pop(dataclasses.replace(unit, mode="fixed"), None)
    if hit is None:
        return None
    fixed, res = hit
    same = same_head(fixed, dataclasses.replace(problem, mode="fixed")) and fixed.radius == problem.radius
    return res if same else None


def certify_layer_units(arrays: dict, spec, query_positions, units, layer: int, **unit_kw):
    """(table, certificate entries, row pool) of the units; unit_kw go to `certify_unit`."""
    rows, entries, pool = [], {}, RowPool()
    batched = not unit_kw.get("legacy_ascent", False)
    groups, ascents, started = _radius_groups(units) if batched else {}, {}, set()
    ascent_kw = {k: unit_kw[k] for k in ("ascent_restarts", "ascent_steps", "seed", "device") if k in unit_kw}
    warm_for = {dataclasses.replace(u, mode="fixed") for u in groups}  # fixed units whose solve is a warm start
    solved: dict = {}  # those fixed units' (problem, exact result), until their varying unit's batch takes them
    for unit in tqdm(units, desc=f"certify layer {layer}", file=sys.stderr, mininterval=5):
        problem = head_problem(arrays, spec, query_positions, unit)
        if unit in groups and unit not in started:
            members = [m for m in groups[unit] if m not in started]
            started.update(members)
            problems = [head_problem(arrays, spec, query_positions, m) for m in members]
            ascents.update(zip(members, varying_ascents(
                problems, fixed_exact=[_fixed_exact(solved, m, p) for m, p in zip(members, problems)], **ascent_kw)))
        certificates: dict = {}
        exact: list | None = [] if unit in warm_for else None
        row = certify_unit(problem, certificates=certificates, ascent=ascents.pop(unit, None), exact_out=exact,
                           **unit_kw)
        if exact:
            solved[unit] = (problem, exact[0])
        if row["status"] != "ok":
            level = logging.ERROR if row["status"] in ("UNSOUND", "error") else logging.WARNING
            logging.log(level, "%s %s: %s", row["status"], unit, row["error"])
            if row["status"] == "UNSOUND":
                print(f"attncert: SOUNDNESS VIOLATION {unit}: {row['error']}", file=sys.stderr)
        entries.update(flatten(len(rows), unit.key(), certificates, pool))
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS), entries, pool
