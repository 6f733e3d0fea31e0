"""The certificates of a layer's table on disk: `data/certify/{model}/layer{L}_certificates.npz`.

One file per layer, next to `layer{L}.csv`; row r of the table owns the keys `r{r}/...`:

    r{r}/unit                   the row's unit key as JSON (layer, head, prompt, query_pos, radius, norm, mode)
    r{r}/reduction/{s0, w0, u_s, u_w, eps_s, eps_w, R_s, R_w}
                                the fixed-query reduction s_j = s0_j + u_s.delta_j, w_j = w0_j + u_w.delta_j with
                                its error bounds and half-widths (`head.reduced_geometry`)
    r{r}/first_order/{l, u, W, beta}
                                the score intervals [l_j, u_j] and value upper bounds W_j of the greedy LP, and the
                                bilinear bound beta of a varying query (nan for a fixed one)
    r{r}/first_order/{scale_q, scale_k}@shared
                                linf varying query: the diagonal scalings s, t (float64, length d) at which beta's
                                diagonally scaled spectral bound was evaluated (`certify.diagonal_bilinear_bound`;
                                also what the row's second-order bb used); per head, so stored once per file
    r{r}/exact/witness_delta    the perturbation delta (n, d) of the attended tokens whose value Z0 + delta (float64
                                sum) is exact_lo (fixed query); `witness` (Z itself) when that sum is not Z
    r{r}/best_feasible/witness  the tokens Z (n, d) the ascent found, whose value is best_feasible (varying query)
    r{r}/{second_order, second_order_tight}/kind
                                "dual": a weak-duality certificate follows; "support": a support-function certificate
                                of the long-context fixed query follows (below); "first_order": the reported value is
                                the first-order bound (a tie or a labelled fallback), certified by that certificate
    r{r}/{...}/{c, A_rows, A_shape, b, dims, lo, hi, z, data_rel_err, bound, affine}
                                the conic program in the units it was solved in (minimize c.x s.t. A x + s = b,
                                s in K; K from dims = [zero, nonneg, exp, soc sizes...]), the box [lo, hi] that
                                contains every lifted true point, the repaired dual z in K^*, its bound, and the map
                                (origin, scale, tail) to g: value = origin + scale * bound + tail. Row i of A is
                                row A_rows[i] of the layer's row pool (pool/{data, indices, indptr}, CSR): the
                                rows the programs of a layer share are stored once
    r{r}/{...}/build/{path, key, ..., edges}
                                the builder's inputs, from which a checker rebuilds the program without solving:
                                the build key, the facet edges per token (-1 padded) and the relaxation data --
                                fixed query: `FixedRelaxationData` (fixed_program); varying query: the fields of
                                `VaryingData` before negligible tokens are dropped (path varying_factored:
                                varying_factored_program; varying_unfactored: varying_program; varying_long:
                                varying_long_program, with the key-space kq, kbar, and the moment cuts of the
                                query's shift shift_w (cuts x keys), shift_F (cuts x d_h x d_h), linf: the
                                multipliers support_t of the keys' support cuts; u_s, u_w are the reduction's).
                                A field `name@shared` holds the id of an array stored once per layer
                                (`arrays/{id}`: p and pbar are the same at every radius)

A "support" certificate (`dual_record.SupportCertificate`; docs/certificate.md §4.1) stores the token program
without facets (c, A_rows, A_shape, b, dims: no box, X enters through the exact support function of P), the dual z
on its rows, its normalization multiplier t = z[0], data_rel_err, bound, affine, and build/ with path "support", the
key [n, norm, upper_cone, monotone points] and the fields of `FixedRelaxationData` (`token_program.build_program`
rebuilds the program from them).

The long-context experiment stores its rows the same way (`data/long_context/{model}/units_certificates.npz`, row r
of `units.csv`; the unit also names its length).

Nothing here solves anything: `attncert.audit` reads these files with numpy alone.
"""
from __future__ import annotations

import io
import json
import math
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.dual_bound.data_error import DATA_REL_ERR
from attncert.integrity.file_integrity import atomic_path

FORMAT_VERSION = 2  # 2: first_order/{scale_q, scale_k} of the linf varying query (the diagonal bilinear bound)
SECOND_ORDER_NUMBERS = ("second_order", "second_order_tight")


class RowPool:
    """The distinct rows of every stored program of a layer, each kept once (the paper-like and the tight
    program of a unit share most rows; a program is its list of row ids)."""

    def __init__(self):
        self.ids: dict[bytes, int] = {}
        self.data: list[np.ndarray] = []
        self.indices: list[np.ndarray] = []
        self.array_ids: dict[bytes, int] = {}  # whole arrays shared by several records (`add_array`)
        self.shared: list[np.ndarray] = []

    def add_array(self, a: np.ndarray) -> np.ndarray:
        """The id of array `a` among the layer's shared arrays (stored once: `arrays/{id}`)."""
        a = np.ascontiguousarray(a)
        key = a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()
        if key not in self.array_ids:
            self.array_ids[key] = len(self.shared)
            self.shared.append(a)
        return np.int64(self.array_ids[key])

    def add(self, A) -> np.ndarray:
        """The pool ids of the rows of A (a row's key: its int32 column indices' and float64 values' bytes)."""
        A = sp.csr_matrix(A)
        indices, data = A.indices.astype(np.int32), A.data.astype(np.float64)
        idx_bytes, dat_bytes = indices.tobytes(), data.tobytes()
        ptr = A.indptr.tolist()
        ids, out = self.ids, []
        for a, e in zip(ptr[:-1], ptr[1:]):
            key = idx_bytes[4 * a:4 * e] + dat_bytes[8 * a:8 * e]
            row = ids.get(key)
            if row is None:
                row = ids[key] = len(self.data)
                self.data.append(data[a:e].copy())
                self.indices.append(indices[a:e].copy())
            out.append(row)
        return np.asarray(out, dtype=np.int32).reshape(A.shape[0])

    def arrays(self) -> dict[str, np.ndarray]:
        lengths = np.asarray([d.size for d in self.data], dtype=np.int64)
        shared = {f"arrays/{k}": a for k, a in enumerate(self.shared)}
        return shared | {"pool/data": np.concatenate(self.data) if self.data else np.zeros(0),
                "pool/indices": np.concatenate(self.indices) if self.indices else np.zeros(0, np.int32),
                "pool/indptr": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)}


FIXED_DATA_FIELDS = ("A", "w0", "g0", "eps_s", "eps_w", "R_s", "R_w", "rho_w", "rho_o", "radius", "tail")
SHARED = "@shared"  # suffix of a field stored as the id of a shared array (`RowPool.add_array`)
SCALING_FIELDS = ("scale_q", "scale_k")  # first_order: the bilinear bound's scalings (per head: always shared)
REDUCTION_FIELDS = ("u_s", "u_w")  # fields of the varying data that are the reduction's (not stored twice)
VARYING_PATHS = ("varying_factored", "varying_unfactored", "varying_long")  # the varying-query programs (the same
#                                                                           fields; varying_long also kq, kbar)


def _construction_arrays(construction: dict, pool: RowPool) -> dict:
    """The builder's inputs of a program (`dual_record.note_construction`) as arrays."""
    path = construction.get("path")
    if path in ("fixed", "support"):
        D = construction["data"]
        out = {f"build/{k}": np.asarray(getattr(D, k), dtype=np.float64) for k in FIXED_DATA_FIELDS}
        out["build/norm"] = np.array(D.norm)
    elif path in VARYING_PATHS and "key" in construction:
        out = {}
        for k, v in construction["fields"].items():
            if k in REDUCTION_FIELDS:
                continue
            v = np.asarray(v)
            if v.ndim and v.size > 64:
                out[f"build/{k}{SHARED}"] = pool.add_array(v)
            else:
                out[f"build/{k}"] = v
    else:
        return {"build/path": np.array(str(path))} if path else {}
    out.update({"build/path": np.array(path), "build/key": np.array(json.dumps(list(construction["key"])))})
    edges = construction.get("edges")
    if edges is not None:
        width = max((e.size for e in edges), default=0)
        padded = np.full((len(edges), width), -1, dtype=np.int32)
        for j, e in enumerate(edges):
            padded[j, :e.size] = e
        out["build/edges"] = padded
    cuts = construction.get("shift_cuts")
    if cuts is not None:  # varying_long: the moment cuts of the query's shift (weights per key, F)
        out["build/shift_w"] = np.array([w for w, _ in cuts], dtype=np.float64).reshape(
            (len(cuts), np.size(cuts[0][0])) if cuts else (0, 0))
        out["build/shift_F"] = np.array([F for _, F in cuts], dtype=np.float64).reshape(
            (len(cuts), *np.shape(cuts[0][1])) if cuts else (0, 0, 0))
    support = construction.get("support_ts")
    if support is not None:  # varying_long, linf: the multipliers of the keys' support cuts
        out["build/support_t"] = np.asarray(support, dtype=np.float64).reshape(-1)
    return out


def bare_program(cert):
    """(the token program without facets, the dual z mapped onto its rows by row family) of a support-function
    certificate (`dual_record.SupportCertificate`): the facet rows (rows of X) carry no multiplier in its bound."""
    from attncert.certify.second_order.fixed_query.token_program import build_program  # the builder only (no solve)

    key = cert.construction["key"]
    prog = build_program(cert.construction["data"], bool(key[2]), int(key[3]))
    z = np.zeros(prog.b.size)
    for name, (start, dim) in prog.families.items():
        src, src_dim = cert.prog.families[name]
        if src_dim != dim:
            raise ValueError(f"row family {name} has another cone size in the solved program")
        rows = 1 if name == "norm" else dim * prog.n  # the normalization: one row for all tokens
        z[start:start + rows] = cert.z[src:src + rows]
    return prog, z


def _support_arrays(cert, pool: RowPool) -> dict:
    """A support-function certificate (`dual_record.SupportCertificate`): the token program without facets, the
    dual on its rows (its normalization multiplier t is z[0]), the bound and the map to g."""
    prog, z = bare_program(cert)
    dims = prog.dims
    return {**_construction_arrays(cert.construction, pool), "kind": np.array("support"), "c": prog.c,
            "A_rows": pool.add(prog.A), "A_shape": np.asarray(prog.A.shape, dtype=np.int64), "b": prog.b,
            "dims": np.asarray([dims.zero, dims.nonneg, dims.exp, *dims.soc], dtype=np.int64), "z": z,
            "t": np.float64(z[prog.families["norm"][0]]), "data_rel_err": np.float64(DATA_REL_ERR),
            "bound": np.float64(cert.bound), "affine": np.asarray(cert.affine, dtype=np.float64)}


def _dual_arrays(cert, pool: RowPool) -> dict:
    if getattr(cert, "kind", "dual") == "support":
        return _support_arrays(cert, pool)
    dims = cert.dims
    return {
        **_construction_arrays(cert.construction, pool),
        "kind": np.array("dual"),
        "c": cert.c,
        "A_rows": pool.add(cert.A),
        "A_shape": np.asarray(cert.A.shape, dtype=np.int64),
        "b": cert.b,
        "dims": np.asarray([dims["zero"], dims["nonneg"], dims["exp"], *dims["soc"]], dtype=np.int64),
        "lo": cert.lo,
        "hi": cert.hi,
        "z": cert.z,
        "data_rel_err": np.float64(cert.data_rel_err),
        "bound": np.float64(cert.bound),
        "affine": np.asarray(cert.affine, dtype=np.float64),
    }


def flatten(row: int, unit: dict, certificates: dict, pool: RowPool) -> dict[str, np.ndarray]:
    """The npz entries of one row from the dict `certify.run.certify_unit` fills (program rows go to `pool`)."""
    out = {f"r{row}/unit": np.array(json.dumps(unit, sort_keys=True))}
    for part in ("reduction", "first_order", "exact", "best_feasible"):
        for k, v in certificates.get(part, {}).items():
            v = np.asarray(v)
            if (part == "reduction" and v.size > 64) or (part == "first_order" and k in SCALING_FIELDS):
                # u_s, u_w: the same at every radius and mode; scale_q, scale_k: at every unit of the head
                out[f"r{row}/{part}/{k}{SHARED}"] = pool.add_array(v)
            else:
                out[f"r{row}/{part}/{k}"] = v
    for name in SECOND_ORDER_NUMBERS:
        entry = certificates.get(name)
        if entry is None:
            continue
        arrays = _dual_arrays(entry["cert"], pool) if entry["kind"] == "dual" else {"kind": np.array(entry["kind"])}
        out.update({f"r{row}/{name}/{k}": v for k, v in arrays.items()})
    return out


SHUFFLED = "@bytes"  # suffix of a float64 array stored as its 8 byte planes (shape in the suffix's entry)


def write_certificates(path: str | Path, entries: dict[str, np.ndarray], pool: RowPool | None = None,
                       compression: int = zipfile.ZIP_DEFLATED) -> None:
    """All rows' entries into one npz (a zip of .npy members), written atomically.

    Float arrays are stored as their byte planes (all first bytes, then all second bytes, ...: the exponent
    bytes of similar numbers line up) and deflate-compressed; `CertificateFile` restores them bit for bit.
    Deflate, not LZMA: a layer has tens of thousands of small members, and an LZMA compressor costs
    milliseconds to set up per member (10x the write time for files about 5% smaller;
    `python -m bench.certificate_compression`). `compression` is a zipfile constant; readers take any.
    """
    entries = dict(entries)
    if pool is not None:
        entries.update(pool.arrays())
    entries["format_version"] = np.int64(FORMAT_VERSION)
    headers: dict = {}
    with atomic_path(path) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=compression) as zf:
            for key, value in entries.items():
                value = np.asarray(value)
                if value.dtype == np.float64 and value.size >= 16:
                    shape = np.asarray(value.shape, dtype=np.int64)
                    value = np.ascontiguousarray(value).reshape(-1).view(np.uint8).reshape(-1, 8).T.copy()
                    _write_member(zf, key + SHUFFLED, shape, compression, headers)
                _write_member(zf, key, value, compression, headers)


def _npy_bytes(value: np.ndarray, headers: dict | None = None) -> bytes:
    """The .npy file of `value`, as `np.lib.format.write_array` writes it (allow_pickle=False). headers: the npy
    headers seen so far by (dtype, shape): a C-ordered array of plain dtype whose header is known is that header
    and its data bytes (what write_array writes for it), without numpy's header formatting per member."""
    plain = (headers is not None and value.flags.c_contiguous and not value.dtype.hasobject
             and value.dtype.fields is None and value.dtype.subdtype is None)
    key = (value.dtype.str, value.shape) if plain else None
    if key is not None and key in headers:
        return headers[key] + value.tobytes()
    buf = io.BytesIO()
    np.lib.format.write_array(buf, value, allow_pickle=False)
    out = buf.getvalue()
    if key is not None:
        headers[key] = out[:len(out) - value.nbytes]
    return out


def _write_member(zf: zipfile.ZipFile, key: str, value: np.ndarray, compression: int,
                  headers: dict | None = None) -> None:
    info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))  # no clock: same data, same bytes
    info.compress_type = compression
    zf.writestr(info, _npy_bytes(value, headers))


PROGRAM_FIELDS = ("c", "A_rows", "A_shape", "b", "dims", "lo", "hi", "z", "data_rel_err", "affine")
SUPPORT_FIELDS = ("c", "A_rows", "A_shape", "b", "dims", "z", "data_rel_err", "affine")  # no box: X is exact


def check_program_shapes(part: dict) -> None:
    """ValueError unless a stored dual certificate's arrays have consistent shapes: c, lo, hi one entry per column,
    b and z one per row, the cone sizes summing to the rows, a 3-entry affine map (a support-function certificate:
    the same without lo, hi)."""
    support = str(part.get("kind")) == "support"
    missing = [k for k in (SUPPORT_FIELDS if support else PROGRAM_FIELDS) if k not in part]
    if missing:
        raise ValueError(f"stored program without {', '.join(missing)}")
    shape, dims = np.asarray(part["A_shape"]), np.asarray(part["dims"])
    if shape.shape != (2,) or dims.ndim != 1 or dims.size < 3 or not np.issubdtype(dims.dtype, np.integer) \
            or np.any(dims < 0):
        raise ValueError("stored program with a malformed shape or cone list")
    m, n = int(shape[0]), int(shape[1])
    n_rows = int(dims[0] + dims[1] + 3 * dims[2] + dims[3:].sum())
    sizes = {"c": n, "b": m, "z": m} if support else {"c": n, "lo": n, "hi": n, "b": m, "z": m}
    for k, want in sizes.items():
        a = np.asarray(part[k])
        if a.shape != (want,) or a.dtype != np.float64:
            raise ValueError(f"stored program's {k} has shape {a.shape} ({a.dtype}), expected ({want},) float64")
    if n_rows != m or np.asarray(part["affine"]).shape != (3,) or np.asarray(part["data_rel_err"]).shape != ():
        raise ValueError("stored program's cones, affine map or data-error model do not fit its shape")


class CertificateFile:
    """Read access to one layer's certificates: `row(r)` gives {part: {field: array}} of row r."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._npz = np.load(self.path, allow_pickle=False)
        version = int(self._npz["format_version"]) if "format_version" in self._npz.files else -1
        if version != FORMAT_VERSION:
            raise ValueError(f"{self.path}: certificate format {version}, expected {FORMAT_VERSION}; "
                             "fix: regenerate it with the certify_layer rule")
        self._by_row: dict[int, list[str]] = {}
        self._files = set(self._npz.files)
        self._layouts: dict[bytes, tuple] = {}  # npy header bytes -> (dtype, shape, fortran_order)
        for key in self._npz.files:
            if key.startswith("r") and not key.endswith(SHUFFLED):
                head, _, rest = key.partition("/")
                self._by_row.setdefault(int(head[1:]), []).append(rest)

    @property
    def rows(self) -> list[int]:
        return sorted(self._by_row)

    def row(self, r: int) -> dict:
        out: dict = {}
        for rest in self._by_row.get(r, []):
            value = self.array(f"r{r}/{rest}")
            if rest == "unit":
                out["unit"] = json.loads(str(value))
                continue
            if rest.endswith(SHARED):
                rest, value = rest[:-len(SHARED)], self.array(f"arrays/{int(value)}")
            part, _, field = rest.partition("/")
            out.setdefault(part, {})[field] = value
        return out

    @property
    def keys(self) -> list[str]:
        """Every stored entry (byte-plane parts merged into their arrays)."""
        return [k for k in self._npz.files if not k.endswith(SHUFFLED) and k != "format_version"]

    def _member(self, key: str) -> np.ndarray:
        """The array of member `key`, as np.load reads it (allow_pickle=False): the first member with a given npy
        header goes through numpy's reader, which validates it; a later member with the same header bytes (a
        layer's many small arrays share a few) reuses its parsed dtype, shape and order and reads the data alone."""
        with self._npz.zip.open(key + ".npy") as fh:
            raw = fh.read()
        major = raw[6] if len(raw) > 8 and raw[:6] == b"\x93NUMPY" else 0
        start = 10 if major == 1 else 12
        end = start + int.from_bytes(raw[8:start], "little") if major in (1, 2, 3) else -1
        layout = self._layouts.get(raw[:end]) if end > 0 else None
        if layout is None:
            value = np.lib.format.read_array(io.BytesIO(raw), allow_pickle=False)
            if end > 0:
                self._layouts[raw[:end]] = (value.dtype, value.shape, bool(np.isfortran(value)))
            return value
        dtype, shape, fortran = layout
        size = math.prod(shape) * dtype.itemsize
        if len(raw) - end < size:
            raise ValueError(f"EOF: reading array data, expected {size} bytes got {len(raw) - end}")  # as numpy
        value = np.frombuffer(raw, dtype=dtype, count=math.prod(shape), offset=end).copy()
        return value.reshape(shape[::-1]).transpose() if fortran else value.reshape(shape)

    def array(self, key: str) -> np.ndarray:
        value = self._member(key)
        if key + SHUFFLED in self._files:
            shape = tuple(int(x) for x in self._member(key + SHUFFLED))
            value = np.ascontiguousarray(value.T).reshape(-1).view(np.float64).reshape(shape)
        return value

    def matrix(self, rows: np.ndarray, shape) -> sp.csr_matrix:
        """A program's constraint matrix from its row ids in the pool; ids, shape and the pool's structure are
        validated first (ValueError), so that no array is built from an inconsistent file."""
        if not hasattr(self, "_pool"):
            data, indices, indptr = (self.array(f"pool/{k}") for k in ("data", "indices", "indptr"))
            if not (data.ndim == indices.ndim == indptr.ndim == 1 and data.size == indices.size and indptr.size >= 1
                    and np.issubdtype(indptr.dtype, np.integer) and np.issubdtype(indices.dtype, np.integer)
                    and indptr[0] == 0 and indptr[-1] == data.size and np.all(np.diff(indptr) >= 0)):
                raise ValueError("the row pool is not a valid CSR structure")
            self._pool = (data, indices, indptr)
        data, indices, indptr = self._pool
        shape = np.asarray(shape)
        rows = np.asarray(rows)
        if shape.shape != (2,) or not np.issubdtype(shape.dtype, np.integer) or np.any(shape < 0) \
                or rows.shape != (int(shape[0]),) or (rows.size and not np.issubdtype(rows.dtype, np.integer)):
            raise ValueError(f"stored matrix shape {shape.tolist()} does not fit its {rows.size} row ids")
        if rows.size and (rows.min() < 0 or rows.max() >= indptr.size - 1):
            raise ValueError("stored matrix row ids outside the row pool")
        starts, ends = indptr[rows], indptr[rows + 1]
        lengths = ends - starts
        ends_out = np.cumsum(lengths)  # row k: take[ends_out[k] - lengths[k] + t] = starts[k] + t
        take = np.arange(int(ends_out[-1]) if rows.size else 0) + np.repeat(starts - (ends_out - lengths), lengths)
        if take.size and (indices[take].min() < 0 or indices[take].max() >= int(shape[1])):
            raise ValueError(f"stored matrix column indices outside its {int(shape[1])} columns")
        return sp.csr_matrix((data[take], indices[take], np.concatenate([[0], ends_out])),
                             shape=tuple(int(x) for x in shape))

    def row_with_programs(self, r: int) -> dict:
        """`row(r)` with each stored program's shapes validated (`check_program_shapes`, ValueError) and its
        constraint matrix read from the row pool (field "A")."""
        out = self.row(r)
        for name in SECOND_ORDER_NUMBERS:
            part = out.get(name)
            if part is not None and str(part.get("kind")) in ("dual", "support"):
                check_program_shapes(part)
                part["A"] = self.matrix(part["A_rows"], part["A_shape"])
        return out

    def close(self):
        self._npz.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
