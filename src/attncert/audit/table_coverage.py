"""What the audit must cover: the units the configuration defines, and every table that reports a certified number.

* Certification tables (`data/certify/{model}/layer{L}.csv`): the configuration's grid (`certify` section,
  `heads`, `n_prompts`; `head.unit_grid.grid`) defines the units of each layer. Each must be a row of the table
  exactly once, and the table holds nothing else: a missing, duplicated or foreign unit is a failure
  (`completeness_records`), so that a table cannot lose rows and still pass.
* The long-context table (`data/long_context/{model}/units.csv`): the configuration's `long_context` section
  defines its units, audited like the certification table's (`long_context_audit`).
* The block table (`data/block/{model}/units.csv`): its `second_order_upper` (the SDP-dual bound of the centre's
  quadratic term) keeps no certificate either, and is listed as not covered (`block_records`).

The configuration comes from the Snakemake rule's params, or from the run's configuration files (`attncert audit
--configfile`), never from the files being audited.
"""
from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from attncert.audit.block_audit import BlockAuditConfig
from attncert.audit.long_context_audit import LongContextConfig
from attncert.audit.row_audit import Expect, reported_value
from attncert.head.unit_grid import grid
from attncert.integrity.intermediate_check import verify_intermediate

BLOCK_NUMBERS = ("second_order_upper",)
BLOCK_REASON = ("block stage: the SDP-dual bound of the centre's quadratic term keeps no certificate, so it is not "
                "audited")


class AuditInputError(Exception):
    """A malformed input of the audit (a file or an argument): one line, naming the fix."""


@dataclass
class CoverageConfig:
    """The certification grid of a run (the values its `certify_layer` jobs receive)."""

    heads: list | str
    prompts: list
    query_positions: list
    radii: list
    norms: list
    modes: list
    varying: dict = field(default_factory=dict)
    expect: Expect = Expect()
    layers: list | None = None  # None: every layer on disk
    long_context: LongContextConfig | None = None  # the long-context grid (None: the run has none)
    block: BlockAuditConfig | None = None  # the block grid (None: the run has none)
    config: dict = field(default_factory=dict)  # the whole configuration (model, prompts, ...: weights and tables)

    @classmethod
    def from_config(cls, config: dict, layers: list | None = None, heads: list | None = None) -> "CoverageConfig":
        """From a merged configuration (`layers`, `heads`: the run's resolved lists, when known)."""
        c = config["certify"]
        n_prompts = int(config.get("n_prompts", 0))
        resolved = config.get("resolved") or {}  # the run's own lists (`run_configuration`), when recorded
        cfg_heads = resolved.get("heads", config.get("heads", "all"))
        cfg_layers = resolved.get("layers", config.get("layers", "all"))
        return cls(heads=heads if heads is not None else cfg_heads,
                   prompts=[int(p) for p in c.get("prompts", list(range(n_prompts)))],
                   query_positions=[int(q) for q in c["query_positions"]], radii=[float(r) for r in c["radii"]],
                   norms=list(c["norms"]), modes=list(c["modes"]), varying=dict(c.get("varying") or {}),
                   expect=Expect(bool(c.get("second_order", True)), bool(c.get("second_order", True))
                                 and bool(c.get("tight", True))),
                   layers=layers if layers is not None else (None if cfg_layers == "all" else list(cfg_layers)),
                   long_context=LongContextConfig.from_config(config), block=BlockAuditConfig.from_config(config),
                   config=dict(config))

    def units(self, layer: int, n_heads: int) -> list[tuple]:
        heads = range(n_heads) if self.heads == "all" else [int(h) for h in self.heads]
        return [unit_key(u.key()) for u in grid(heads, self.prompts, self.query_positions, self.radii, self.norms,
                                                self.modes, layer, self.varying)]


def unit_key(row: dict) -> tuple:
    """(head, prompt, query_pos, radius, norm, mode) of a table row or a unit."""
    return (int(row["head"]), int(row["prompt"]), int(row["query_pos"]), float(row["radius"]), str(row["norm"]),
            str(row["mode"]))


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_grid_config(paths: list[str], model: str, root: Path | None = None) -> CoverageConfig:
    """The grid of the run configured by `paths` (merged in order, as Snakemake's --configfile does); the layers,
    heads and block transitions that "all" stands for are the run's recorded ones under `root` when it has them
    (`run_configuration`), else read off the files on disk."""
    config: dict = {}
    for p in paths:
        try:
            loaded = yaml.safe_load(Path(p).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise AuditInputError(f"--configfile {p}: cannot be read ({type(e).__name__}); fix: pass the run's "
                                  "configuration file, e.g. workflow/config/default.yaml") from None
        if not isinstance(loaded, dict):
            raise AuditInputError(f"--configfile {p}: not a mapping of configuration keys; fix: pass the run's "
                                  "configuration file, e.g. workflow/config/default.yaml")
        config = _merge(config, loaded)
    name = (config.get("model") or {}).get("name")
    if root is not None and "resolved" not in config:
        from attncert.audit.run_configuration import RunConfigurationError, read_run_configuration

        try:
            config["resolved"] = read_run_configuration(root, model).get("resolved") or {}
        except RunConfigurationError:
            pass
    if name != model:
        raise AuditInputError(f"the configuration is for model {name!r}, not {model!r}; fix: pass the configuration "
                              f"of the run that wrote data/certify/{model}/")
    try:
        return CoverageConfig.from_config(config)
    except (KeyError, TypeError, ValueError) as e:
        raise AuditInputError(f"the configuration has no usable certify grid ({type(e).__name__}: {e}); fix: pass "
                              "the run's configuration file, e.g. workflow/config/default.yaml") from None


def _row_record(table: str, layer, r: int, row: dict, number: str, status: str, check: str, reason: str,
                reported=math.nan) -> dict:
    return {"table": table, "layer": layer, "row": r, "head": row.get("head", ""), "prompt": row.get("prompt", ""),
            "query_pos": row.get("query_pos", row.get("position", "")), "radius": row.get("radius", ""),
            "norm": row.get("norm", ""), "mode": row.get("mode", ""), "length": row.get("length", ""),
            "number": number, "reported": reported,
            "status": status, "check": check, "margin": -math.inf if status == "fail" else math.nan,
            "reason": reason, "margins": ""}


def completeness_records(table_rows: list[dict], coverage: CoverageConfig, layer: int, files) -> list[dict]:
    """One failing record per unit of the grid missing from the table, per duplicated row and per row outside
    the grid; nothing when the table is exactly the grid."""
    n_heads = int(files.arrays["W_Q"].shape[0])
    want = coverage.units(layer, n_heads)
    out = []
    seen: Counter = Counter()
    for r, row in enumerate(table_rows):
        try:
            key = unit_key(row)
        except (KeyError, ValueError):
            out.append(_row_record("certify", layer, r, row, "row", "fail", "completeness", "unreadable unit columns"))
            continue
        seen[key] += 1
        if str(row.get("layer")) != str(layer):
            out.append(_row_record("certify", layer, r, row, "row", "fail", "completeness", "row of another layer"))
        elif key not in set(want):
            out.append(_row_record("certify", layer, r, row, "row", "fail", "completeness",
                                   "row not in the configuration's grid"))
        elif seen[key] == 2:
            out.append(_row_record("certify", layer, r, row, "row", "fail", "completeness", "unit repeated"))
    for key in want:
        if not seen[key]:
            h, p, q, radius, norm, mode = key
            row = {"head": h, "prompt": p, "query_pos": q, "radius": radius, "norm": norm, "mode": mode}
            out.append(_row_record("certify", layer, -1, row, "row", "fail", "completeness",
                                   "unit of the configuration missing from the table"))
    return out


def _listed(path: Path, table: str, numbers: tuple, reason: str, layer_of) -> list[dict]:
    if not path.exists():
        return []
    with open(verify_intermediate(path), newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for r, row in enumerate(rows):
        for k in numbers:
            text = str(row.get(k, "")).strip()
            if text:
                out.append(_row_record(table, layer_of(row), r, row, k, "not covered", "no_certificate", reason,
                                       reported=reported_value(text)))
    return out


def block_records(root: Path, model: str) -> list[dict]:
    return _listed(root / "block" / model / "units.csv", "block", BLOCK_NUMBERS, BLOCK_REASON,
                   lambda row: row.get("layer_next", ""))
