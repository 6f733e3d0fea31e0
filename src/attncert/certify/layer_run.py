"""Certify every unit of one layer: the rows of `data/certify/{model}/layer{L}.csv` and their certificates.

`certify_layer_units` runs `run.certify_unit` on each unit of the grid (progress with tqdm; a row that is not
"ok" is logged, a soundness violation loudly) and collects the certificates of each row for
`certificate_store.write_certificates`.
"""
from __future__ import annotations

import logging
import sys

import pandas as pd
from tqdm import tqdm

from attncert.certify.certificate_store import RowPool, flatten
from attncert.certify.run import COLUMNS, certify_unit
from attncert.head.units import head_problem


def certify_layer_units(arrays: dict, spec, query_positions, units, layer: int, **unit_kw):
    """(table, certificate entries, row pool) of the units; unit_kw go to `certify_unit`."""
    rows, entries, pool = [], {}, RowPool()
    for unit in tqdm(units, desc=f"certify layer {layer}", file=sys.stderr, mininterval=5):
        certificates: dict = {}
        row = certify_unit(head_problem(arrays, spec, query_positions, unit), certificates=certificates, **unit_kw)
        if row["status"] != "ok":
            level = logging.ERROR if row["status"] in ("UNSOUND", "error") else logging.WARNING
            logging.log(level, "%s %s: %s", row["status"], unit, row["error"])
            if row["status"] == "UNSOUND":
                print(f"attncert: SOUNDNESS VIOLATION {unit}: {row['error']}", file=sys.stderr)
        entries.update(flatten(len(rows), unit.key(), certificates, pool))
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS), entries, pool
