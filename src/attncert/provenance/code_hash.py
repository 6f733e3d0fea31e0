"""The source a pipeline job runs, as one hash: the job's entry script and every module of the package
it imports, directly or through other modules (the transitive closure of `attncert` imports, read
from the source text with `ast`, nothing imported).

A rule passes `code_hash(script)` as a `params:` entry, so Snakemake's params trigger reruns the job
when any module it depends on changes, and only then: editing a certification module reruns the
certification jobs and what depends on their outputs, never a Min-IP job.
"""
from __future__ import annotations

import ast
import hashlib
from functools import lru_cache
from pathlib import Path

PACKAGE = "attncert"
SRC = Path(__file__).resolve().parents[2]  # .../src


def _module_file(name: str) -> Path | None:
    """src/attncert/a/b.py or src/attncert/a/b/__init__.py for 'attncert.a.b' (None if neither)."""
    base = SRC.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _package_of(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts if parts[-1] == "__init__" else parts[:-1]).removesuffix(".__init__")


@lru_cache(maxsize=None)
def imported_modules(path: Path) -> frozenset[str]:
    """The `attncert` modules one file imports (absolute and relative imports, at any depth of the file)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = _package_of(path).split(".")
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return frozenset(n for n in names if n == PACKAGE or n.startswith(PACKAGE + "."))


def closure(path: Path) -> list[Path]:
    """Every package file `path` depends on (parents' __init__ files included), sorted."""
    seen: set[Path] = set()
    todo = [path]
    while todo:
        for name in imported_modules(todo.pop()):
            parts = name.split(".")
            for k in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__ too
                f = _module_file(".".join(parts[:k]))
                if f is not None and f not in seen:
                    seen.add(f)
                    todo.append(f)
    return sorted(seen)


def code_hash(script: str | Path) -> str:
    """sha256 (16 hex digits) over the entry script and its package closure, path and text."""
    script = Path(script).resolve()
    h = hashlib.sha256()
    for f in [script, *closure(script)]:
        h.update(str(f.relative_to(SRC.parent) if f.is_relative_to(SRC.parent) else f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
