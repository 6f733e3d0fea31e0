"""Files written so that they are never half there, and the checksum that says a file is the one written.

`atomic_path` yields a temporary name in the target's folder and renames it into place only on success (an
interrupted job leaves no file that looks complete); `file_checksum` is the size and sha256 a sidecar
(`sidecar_path`: X.json next to X) records and `intermediate_check` compares before a file is read;
`remove_orphan_sidecars` drops the sidecars whose file is gone (Snakemake removes the outputs of a failed or
interrupted job, and the outputs of a job it reruns, but knows nothing of their sidecars).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


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
    """`record` as indented JSON (keys sorted, anything else as its str), written atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")


def file_checksum(path: str | Path) -> dict:
    """{"sha256": hex digest, "size_bytes": size} of a file's bytes."""
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return {"sha256": digest, "size_bytes": os.path.getsize(path)}


def is_sidecar_record(path: str | Path) -> bool:
    """Whether `path` holds a sidecar record (a JSON object with the sha256 and size of the file it describes)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "sha256" in record and "size_bytes" in record


def remove_orphan_sidecars(roots) -> list[Path]:
    """Remove every sidecar X.json under `roots` whose file X no longer exists; return the removed paths.
    (X has a suffix of its own, X.npz.json, X.csv.json, X.json.json: an output `name.json` is never taken for one.)"""
    removed = []
    for root in roots:
        for side in sorted(Path(root).rglob("*.*.json")):
            target = side.with_name(side.name[:-len(".json")])
            if not target.exists() and is_sidecar_record(side):
                side.unlink()
                removed.append(side)
    return removed
