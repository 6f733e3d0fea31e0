"""Several certificate files of consecutive row blocks joined into one, as if one job had written them all.

A job that certifies a block of a table's rows writes its rows as r0, r1, ... with its own row pool and shared
arrays (`certificate_store`). Joining the blocks b = 0, 1, ... in table order renumbers row r of block b to
r + (rows of blocks 0..b-1) and maps the block's pool rows and shared arrays into one pool. `RowPool` numbers a
row (an array) by its first appearance, so a block's pool row j first appears after its rows 0..j-1: mapping the
rows of block 0, then block 1, ... in pool order, each to the id of an equal row already mapped or else to the next
new id, numbers them as one `RowPool` fed every row in table order does. The joined file is therefore the file one
job certifying all rows in that order writes: the same entries, pool and shared-array ids (byte for byte, given the
same certified numbers). Nothing is solved or re-derived: values are copied bit for bit (`CertificateFile.array`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from attncert.certify.certificate_store import SHARED, CertificateFile, RowPool, write_certificates


class _JoinedPool:
    """The joined files' pool rows and shared arrays, each kept once, numbered by first appearance."""

    def __init__(self):
        self.row_ids: dict[bytes, int] = {}
        self.data: list[np.ndarray] = []
        self.indices: list[np.ndarray] = []
        self.array_ids: dict[bytes, int] = {}
        self.shared: list[np.ndarray] = []

    def map_rows(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray) -> np.ndarray:
        """Joined id of every row of a block's pool (CSR arrays), rows new to the join appended in pool order."""
        if not (indptr.ndim == 1 and indptr.size >= 1 and indptr[0] == 0 and indptr[-1] == data.size == indices.size
                and np.all(np.diff(indptr) >= 0)):
            raise ValueError("the row pool is not a valid CSR structure")
        indices = indices.astype(np.int32)
        data = data.astype(np.float64)
        out = np.empty(indptr.size - 1, dtype=np.int32)
        for j in range(indptr.size - 1):
            a, e = indptr[j], indptr[j + 1]
            idx, dat = indices[a:e], data[a:e]
            key = idx.tobytes() + dat.tobytes()
            if key not in self.row_ids:
                self.row_ids[key] = len(self.data)
                self.data.append(dat)
                self.indices.append(idx)
            out[j] = self.row_ids[key]
        return out

    def map_array(self, a: np.ndarray) -> int:
        a = np.ascontiguousarray(a)
        key = a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()
        if key not in self.array_ids:
            self.array_ids[key] = len(self.shared)
            self.shared.append(a)
        return self.array_ids[key]

    arrays = RowPool.arrays     # the entries RowPool writes, in its order (the same shared, data, indices lists)


def merged_entries(paths: list[str | Path], rows_per_file: list[int]) -> dict[str, np.ndarray]:
    """Every entry of the joined file (rows, then pool and shared arrays) for `write_certificates`.

    rows_per_file: the rows each block's table holds; a file whose stored rows are not exactly r0..r{n-1} of
    its table, or whose ids point outside its pool, raises ValueError (a block of another grid, a damaged file)."""
    if len(paths) != len(rows_per_file):
        raise ValueError(f"{len(paths)} certificate files for {len(rows_per_file)} tables")
    entries: dict[str, np.ndarray] = {}
    joined = _JoinedPool()
    offset = 0
    for path, n in zip(paths, rows_per_file):
        with CertificateFile(path) as store:
            if store.rows != list(range(n)):
                raise ValueError(f"{path} stores the certificates of {len(store.rows)} rows, but its table has {n}")
            row_map = joined.map_rows(*(store.array(f"pool/{k}") for k in ("data", "indices", "indptr")))
            array_map: dict[int, int] = {}
            for key in store.keys:
                head, _, rest = key.partition("/")
                if not (head.startswith("r") and head[1:].isdigit()):
                    continue  # the block's own pool and shared arrays: mapped into the joined ones
                value = store.array(key)
                if rest.endswith(SHARED):
                    local = int(value)
                    if local not in array_map:
                        array_map[local] = joined.map_array(store.array(f"arrays/{local}"))
                    value = np.int64(array_map[local])
                elif rest.endswith("/A_rows"):
                    ids = np.asarray(value)
                    if ids.size and (not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0
                                     or ids.max() >= row_map.size):
                        raise ValueError(f"{path}: stored matrix row ids outside the row pool")
                    value = row_map[ids]
                entries[f"r{int(head[1:]) + offset}/{rest}"] = value
        offset += n
    entries.update(joined.arrays())
    return entries


def merge_certificate_files(paths: list[str | Path], rows_per_file: list[int], out: str | Path) -> None:
    """Write the blocks in `paths` (in table order) as one certificate file `out` (`merged_entries`)."""
    write_certificates(out, merged_entries(paths, rows_per_file))
