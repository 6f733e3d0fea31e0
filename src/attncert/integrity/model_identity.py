"""Which model a file was written for: the model section a sidecar records, and whether two sections name the
same model (name, source, family; a local directory by its resolved path). No attncert imports and nothing
that loads a model: the intermediate check, and through it the audit's trusted base, reaches this module."""
from __future__ import annotations

from pathlib import Path

IDENTITY_KEYS = ("name", "source", "family")


def _source(source) -> str:
    path = Path(str(source)).expanduser()
    return str(path.resolve()) if path.is_dir() else str(source)


def same_model(a: dict, b: dict) -> bool:
    """Whether two model sections name the same model: name, source (a directory by its resolved path) and family."""
    return (str(a.get("name")) == str(b.get("name")) and str(a.get("family")) == str(b.get("family"))
            and _source(a.get("source")) == _source(b.get("source")))


def describe_model(model: dict) -> str:
    return f"{model.get('name')} (source {model.get('source')}, family {model.get('family')})"


def recorded_model(record) -> dict | None:
    """The model section a sidecar records (its job's `params.model`), or None for model-independent files."""
    params = record.get("params") if isinstance(record, dict) else None
    model = params.get("model") if isinstance(params, dict) else None
    return model if isinstance(model, dict) and all(k in model for k in IDENTITY_KEYS) else None
