"""The long-context table's numbers, audited like the certification table's.

`data/long_context/{model}/units.csv` holds one row per (length T, head, mode, norm, radius) of the long-context
experiment (`certify.long_context`), and `units_certificates.npz` beside it what certifies each number (the format
of `certify.certificate_store`; the fixed query above 48 keys stores support-function certificates,
`support_duality`). A row's unit is re-derived from the long-context token arrays
(`data/long_context/{model}/layer_tokens.npz`: the layer's weights, W_O and the normalized passage tokens Z_T at
every length) and the configuration (`long_context` section and `spec_seed`), never from the files being audited:

    Z0 = Z_T (bidirectional) or its first query_pos + 1 tokens (causal),
    c  = specification_direction(W_O[head], spec_seed + 1000 layer + head)       (`certify.long_context`),

and every number is checked by `row_audit.audit_row` (pairing, reduction, first order, both second-order numbers,
the exact bracket of the fixed query, best_feasible). The configuration's units must each be a row exactly once,
and the table holds nothing else (`completeness`).
"""
from __future__ import annotations

import csv
import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from attncert.audit.head_enclosure import HeadEnclosure
from attncert.audit.row_audit import NUMBERS, Expect, Outcome, audit_row
from attncert.head.specification import specification_direction
from attncert.integrity.intermediate_check import verify_intermediate

TABLE = "long_context"
NO_CONFIG_REASON = ("long-context experiment: no configuration given (its spec_seed and long_context section define "
                    "the units); audit with --configfile")


@dataclass(frozen=True)
class LongContextConfig:
    """The long-context grid of a run's configuration (`long_context` section, `spec_seed`)."""

    layer: int
    heads: tuple
    lengths: tuple
    query_position: object  # an index, or "last" (T - 1)
    radii: tuple
    norms: tuple
    modes: tuple
    tight: bool
    spec_seed: int

    @classmethod
    def from_config(cls, config: dict) -> "LongContextConfig | None":
        lc = config.get("long_context")
        if not lc:
            return None
        return cls(int(lc["layer"]), tuple(int(h) for h in lc["heads"]), tuple(int(t) for t in lc["lengths"]),
                   lc["query_position"], tuple(float(r) for r in lc["radii"]), tuple(lc["norms"]),
                   tuple(lc.get("modes", ("fixed", "varying"))), bool(lc.get("tight", True)), int(config["spec_seed"]))

    def query_pos(self, length: int) -> int:
        return length - 1 if self.query_position == "last" else int(self.query_position)

    def units(self) -> list[tuple]:
        """(length, head, query_pos, radius, norm, mode) of every unit the configuration defines."""
        return [(T, h, self.query_pos(T), r, norm, mode) for h in self.heads for T in self.lengths
                for mode in self.modes for norm in self.norms for r in self.radii]


def unit_key(row: dict) -> tuple:
    return (int(row["length"]), int(row["head"]), int(row["query_pos"]), float(row["radius"]), str(row["norm"]),
            str(row["mode"]))


class LongContextFiles:
    """The long-context token arrays (read once) and the configuration: the enclosure of a row's unit."""

    def __init__(self, tokens_npz: str | Path, cfg: LongContextConfig):
        with np.load(tokens_npz, allow_pickle=False) as f:
            self.arrays = {k: f[k] for k in f.files if k in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O", "causal")
                           or k.startswith("Z_")}
        self.cfg = cfg
        self._units: dict = {}
        self._balls: dict = {}  # the weights' and tokens' balls, shared by the units that read them

    def unit_of(self, row: dict) -> HeadEnclosure:
        """The unit of a long-context row: its length, head and query position, the configuration's layer and seed."""
        T, h, qp = int(row["length"]), int(row["head"]), int(row["query_pos"])
        if (T, h, qp) not in self._units:
            a = self.arrays
            if f"Z_{T}" not in a or not 0 <= h < a["W_Q"].shape[0] or not 0 <= qp < T:
                raise ValueError(f"no unit of length {T}, head {h}, query position {qp} in the token arrays")
            Z = a[f"Z_{T}"][0]
            Z0 = Z[:qp + 1] if bool(a["causal"]) else Z
            c = specification_direction(a["W_O"][h], self.cfg.spec_seed + 1000 * self.cfg.layer + h)
            self._units[(T, h, qp)] = HeadEnclosure(a["W_Q"][h], a["W_K"][h], a["W_V"][h], a["b_Q"][h], a["b_K"][h],
                                                    a["b_V"][h], Z0, qp, c).share_balls(self._balls, h, (T, qp))
        return self._units[(T, h, qp)]


def _record(r: int, row: dict, number: str, status: str, check: str, margin: float, reason: str, reported=math.nan,
            margins: str = "") -> dict:
    return {"table": TABLE, "layer": row.get("layer", ""), "row": r, "head": row.get("head", ""),
            "prompt": row.get("prompt", ""), "query_pos": row.get("query_pos", ""), "radius": row.get("radius", ""),
            "norm": row.get("norm", ""), "mode": row.get("mode", ""), "length": row.get("length", ""),
            "number": number, "reported": reported, "status": status, "check": check, "margin": margin,
            "reason": reason, "margins": margins}


def completeness(table_rows: list[dict], cfg: LongContextConfig) -> list[dict]:
    """One failing record per configured unit missing from the table, per repeated row and per foreign row."""
    want = cfg.units()
    wanted = set(want)
    out, seen = [], Counter()
    for r, row in enumerate(table_rows):
        try:
            key = unit_key(row)
        except (KeyError, ValueError):
            out.append(_record(r, row, "row", "fail", "completeness", -math.inf, "unreadable unit columns"))
            continue
        seen[key] += 1
        if str(row.get("layer")) != str(cfg.layer):
            out.append(_record(r, row, "row", "fail", "completeness", -math.inf, "row of another layer"))
        elif key not in wanted:
            out.append(_record(r, row, "row", "fail", "completeness", -math.inf,
                               "row not in the configuration's long-context grid"))
        elif seen[key] == 2:
            out.append(_record(r, row, "row", "fail", "completeness", -math.inf, "unit repeated"))
    for key in want:
        if not seen[key]:
            T, h, qp, radius, norm, mode = key
            row = {"layer": cfg.layer, "head": h, "prompt": 0, "query_pos": qp, "radius": radius, "norm": norm,
                   "mode": mode, "length": T}
            out.append(_record(-1, row, "row", "fail", "completeness", -math.inf,
                               "unit of the configuration missing from the table"))
    return out


def _not_covered(rows: list[dict], reason: str) -> list[dict]:
    out = []
    for r, row in enumerate(rows):
        for k in NUMBERS:
            text = str(row.get(k, "")).strip()
            if text:
                out.append(_record(r, row, k, "not covered", "no_configuration", math.nan, reason,
                                   reported=float(text) if _is_float(text) else math.nan))
    return out


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def audit_long_context(root: Path, model: str, cfg: LongContextConfig | None, malformed: tuple,
                       damaged) -> list[dict]:
    """Every number of the long-context table (nothing when the run has none). cfg None: its rows are listed as
    not covered (the units cannot be re-derived without the configuration). malformed, damaged: what a damaged
    certificate file raises, and the error to raise then (`audit_table`)."""
    base = root / "long_context" / model
    table = base / "units.csv"
    if not table.exists():
        if cfg is None:
            return []
        return [_record(-1, {"layer": cfg.layer}, "table", "fail", "completeness", -math.inf,
                        f"{table} is missing, but the run's configuration has a long-context grid; fix: regenerate "
                        f"it with: snakemake --cores all {table}")]
    with open(verify_intermediate(table), newline="") as fh:
        rows = list(csv.DictReader(fh))
    if cfg is None:
        return _not_covered(rows, NO_CONFIG_REASON)
    from attncert.certify.certificate_store import CertificateFile  # the format's reader (imports cvxpy)

    certs = verify_intermediate(base / "units_certificates.npz")
    files = LongContextFiles(verify_intermediate(base / "layer_tokens.npz"), cfg)
    expect = Expect(True, cfg.tight)
    out = completeness(rows, cfg)
    try:
        store = CertificateFile(certs)
    except malformed as e:
        raise damaged(certs, e) from None
    with store:
        for r, row in enumerate(tqdm(rows, desc="audit long context", file=sys.stderr, mininterval=5)):
            try:
                cert = store.row_with_programs(r)
                outcomes = audit_row(files, row, cert, expect)
            except (OSError, EOFError) as e:
                raise damaged(certs, e) from None
            except malformed as e:  # one row's certificate (or unit) is malformed: that row fails, the audit goes on
                why = f"malformed certificate ({type(e).__name__}: {str(e)[:160]})"
                outcomes = [Outcome(k, math.nan, "fail", "certificate", -math.inf, why) for k in NUMBERS]
            out.extend(_record(r, row, o.number, o.status, o.check, o.margin, o.reason, o.reported, o.margins)
                       for o in outcomes)
    return out
