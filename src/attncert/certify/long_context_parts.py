"""The long-context experiment as one job per (length group, head h), and the merge of their parts.

`long_context_problems` orders the units by head, then length, then mode, norm and radius, so the units of one
head and one group of consecutive lengths (`long_context_jobs.length_groups`) are a contiguous block of rows of
`units.csv`. A part is that block certified alone: its table (`parts/lengths{T1-T2-..}_head{h}.csv`, the columns of
`unit_columns.LONG_CONTEXT_COLUMNS`) and its certificates (`parts/lengths{T1-T2-..}_head{h}_certificates.npz`, rows
numbered from 0). The merge concatenates the parts in the order (h in `long_context.heads`, group in length order)
and joins their certificate files (`certificate_merge`), which gives the table and the certificate file one job
certifying every unit writes: the same rows in the same order, the same entries (every unit is certified on its
own, with its own ascent seed). A part whose rows are not exactly its block of the configured grid is refused
(`PartError`).
"""
from __future__ import annotations

import csv
import zipfile
from pathlib import Path

from attncert.certify.certificate_merge import merge_certificate_files
from attncert.certify.certificate_store import CertificateFile
from attncert.certify.long_context_jobs import part_keys
from attncert.certify.unit_columns import LONG_CONTEXT_COLUMNS
from attncert.integrity.file_integrity import atomic_path


class PartError(ValueError):
    """A part that does not hold its (length, head) block of the configured grid; one line, naming the fix."""


def _read_part(path: Path, group: tuple[int, ...], head: int, units: int, fix: str) -> tuple[str, int]:
    """(the part's rows as csv text without the header, their count), checked against its (lengths, head) block."""
    if not path.is_file():
        raise PartError(f"{path} is missing; fix: {fix}")
    text = path.read_text(encoding="utf-8")
    header, _, body = text.partition("\n")
    if header.split(",") != LONG_CONTEXT_COLUMNS:
        raise PartError(f"{path} does not have the long-context table's columns; fix: {fix}")
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    expected = [(str(T), str(head)) for T in group for _ in range(units)]
    found = [(r["length"], r["head"]) for r in rows]
    if found != expected:
        wrong = [f for f in found if f not in expected]
        what = (f"a row of length {wrong[0][0]}, head {wrong[0][1]}" if wrong
                else f"{len(rows)} rows" if len(rows) != len(expected) else "its rows out of order")
        lengths = ", ".join(str(T) for T in group)
        raise PartError(f"{path} holds {what}, but the part of lengths {lengths}, head {head} has {len(expected)} "
                        f"units in length order; fix: {fix}")
    return body, len(rows)


def merge_parts(tables: list[str | Path], certificates: list[str | Path], lengths, heads, units_per_part: int,
                out_table: str | Path, out_certificates: str | Path, fix=lambda path: "regenerate it") -> int:
    """Write the parts (in `part_keys(lengths, heads)` order) as one table and one certificate file; the rows.

    units_per_part: modes x norms x radii (the units of one length and head); fix(path): the fix a refused part's
    message names (the command that regenerates it)."""
    keys = part_keys(lengths, heads)
    if not (len(tables) == len(certificates) == len(keys)):
        raise PartError(f"{len(tables)} tables and {len(certificates)} certificate files for {len(keys)} parts "
                        f"(lengths {list(lengths)} x heads {list(heads)}); fix: list one of each per part")
    bodies, counts = [], []
    for (group, h), table in zip(keys, tables):
        body, n = _read_part(Path(table), group, h, units_per_part, fix(table))
        bodies.append(body)
        counts.append(n)
    for cert, n in zip(certificates, counts):
        try:
            with CertificateFile(cert) as store:
                stored = store.rows
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            raise PartError(f"{cert} does not read as a certificate file ({type(e).__name__}); fix: {fix(cert)}") \
                from None
        if stored != list(range(n)):
            raise PartError(f"{cert} stores {len(stored)} rows, but its table has {n}; fix: {fix(cert)}")
    with atomic_path(out_table) as tmp:
        Path(tmp).write_text(",".join(LONG_CONTEXT_COLUMNS) + "\n" + "".join(bodies), encoding="utf-8")
    merge_certificate_files(list(certificates), counts, out_certificates)
    return sum(counts)
