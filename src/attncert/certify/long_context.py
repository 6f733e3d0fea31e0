"""Long-context experiment (beyond the paper): the certificates of one head attending to up to 512 keys.

The paper certifies query positions 1, 4, 8 and 15, so its heads attend to at most 16 keys, and names a
relaxation linear in the number of keys as the scaling challenge. Here one committed public-domain passage
(`data/long_context_passage.txt`) is read at context lengths T (`long_context.lengths`); every unit is a
head of one layer, the query at `query_position`, all T keys attended (bidirectional model; causal: the
first query_position + 1 keys only, so use a late query there), a query mode of `long_context.modes` (fixed: only
the keys and values move; varying: the query token moves too) and the radii of the config. Each unit is certified
like the main grid (`run.certify_unit`: the exact bracket for a fixed query, the best ascent value for a varying
one, first order, both second-order variants, the soundness check), every certified number is stored with its
certificate (`certificate_store`, audited by `attncert audit`), and the summary gives per mode and length the
median relative gap and seconds. The relative gap is measured against the exact worst case for a fixed query and
against the best ascent value for a varying one (no exact value exists there; `unit_tables.add_gaps`).
"""
from __future__ import annotations

import pandas as pd

from attncert.certify.certificate_store import RowPool, flatten
from attncert.certify.long_context_summary import MODES
from attncert.certify.layer_run import certify_in_radius_batches
from attncert.certify.unit_columns import LONG_CONTEXT_COLUMNS
from attncert.head.problem import HeadProblem
from attncert.head.specification import specification_direction


def long_context_problems(arrays: dict, layer: int, lengths, heads, query_position, radii, norms,
                          spec_seed: int, modes=MODES) -> list[HeadProblem]:
    """Every unit, ordered by (head, length, mode, norm, radius); query_position "last" is T - 1 (a causal head
    then attends to all T keys)."""
    out = []
    causal = bool(arrays["causal"])
    for h in heads:
        c = specification_direction(arrays["W_O"][h], spec_seed + 1000 * layer + h)  # one direction per head
        for T in lengths:
            Z = arrays[f"Z_{T}"][0]
            qp = T - 1 if query_position == "last" else int(query_position)
            if qp >= T:
                raise ValueError(f"long_context.query_position {qp} >= length {T}; fix: lower it or use 'last'")
            Z0 = Z[:qp + 1] if causal else Z
            for mode in modes:
                for norm in norms:
                    for r in radii:
                        meta = dict(layer=layer, head=h, prompt=0, query_pos=qp, length=T)
                        out.append(HeadProblem(arrays["W_Q"][h], arrays["W_K"][h], arrays["W_V"][h],
                                               arrays["b_Q"][h], arrays["b_K"][h], arrays["b_V"][h], Z0, qp, c,
                                               float(r), norm, mode, meta=meta))
    return out


def unit_record(problem: HeadProblem) -> dict:
    """The unit of a long-context row, as its certificates name it (`certificate_store`)."""
    return dict(problem.meta, radius=float(problem.radius), norm=problem.norm, mode=problem.mode)


def certify_long_context(problems: list[HeadProblem], *, ascent_restarts: int, ascent_steps: int, seed: int,
                         tight: bool) -> tuple[pd.DataFrame, dict, RowPool]:
    """(table, certificate entries, row pool): every unit certified, with the certificate of each certified number
    (for `certificate_store.write_certificates`). The varying-query units of one length, head and norm have their
    ascents run as one batch over the radii, like the main grid's (`layer_run.certify_in_radius_batches`)."""
    rows, entries, pool = [], {}, RowPool()
    items = [((p.meta.get("length"), p.meta.get("layer"), p.meta.get("head"), p.norm), p) for p in problems]
    for i, row, certificates in certify_in_radius_batches(
            items, desc="long context", ascent_restarts=ascent_restarts, ascent_steps=ascent_steps, seed=seed,
            tight=tight, ascent_check_fraction=0.0):
        rows.append(row)
        entries.update(flatten(len(rows) - 1, unit_record(problems[i]), certificates, pool))
    return pd.DataFrame(rows, columns=LONG_CONTEXT_COLUMNS), entries, pool
