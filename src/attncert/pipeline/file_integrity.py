"""Files written so that they are never half there, and the checksum that says a file is the one written.

`atomic_path` yields a temporary name in the target's folder and renames it into place only on success (an
interrupted job leaves no file that looks complete); `file_checksum` is the size and sha256 a sidecar
(`sidecar_path`: X.json next to X) records and `intermediate_check` compares before a file is read.
"""
from __future__ import annotations

import hashlib
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


def file_checksum(path: str | Path) -> dict:
    """{"sha256": hex digest, "size_bytes": size} of a file's bytes."""
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return {"sha256": digest, "size_bytes": os.path.getsize(path)}
