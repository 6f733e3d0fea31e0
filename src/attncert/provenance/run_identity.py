"""One identity per run: the model name every output path carries stands for one model (name, source, family).

- `apply_model_source`: `--config model_source=DIR` (or a `model.source` given without a name) runs on a local
  checkpoint under its own name, the directory's (`model.name` when the user gives one), and its own family,
  read from its `config.json` (`model.family` when the user gives one; a mismatch is then a config error).
- `check_no_other_model`: refuses a run whose name already holds outputs of another model (a sidecar under
  `data/*/NAME/` or `figures/*/NAME/` records another source or family), before any job runs, so a run never
  overwrites or mixes with another model's files.
- `remove_own_orphan_sidecars`: the sidecars of outputs Snakemake removed, under this run's name and its Min-IP
  grid's folders only (another model's or grid's folders are never touched, not even their debris).
The comparison of two models (`model_identity`) is shared with the intermediate check, which refuses a job's
input written for another model.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from attncert.configuration.config import ConfigError
from attncert.integrity.file_integrity import remove_orphan_sidecars
from attncert.integrity.model_identity import describe_model, recorded_model, same_model
from attncert.model.model_source import EMBEDDED, RANDOM_GPT2, checkpoint_family

NAME_PATTERN = re.compile(r"[^A-Za-z0-9_.-]+")


def _local_dir(source: str) -> Path | None:
    if source in (EMBEDDED, RANDOM_GPT2):
        return None
    path = Path(source).expanduser()
    return path.resolve() if path.is_dir() else None


def checkpoint_name(directory: str | Path) -> str:
    """A model name from a checkpoint's directory name (characters outside [A-Za-z0-9_.-] become '-')."""
    name = NAME_PATTERN.sub("-", Path(directory).resolve().name).strip("-.")
    return name or "checkpoint"


def apply_model_source(config: dict, given_model: dict | None, default_model: dict | None = None) -> None:
    """Resolve the model section in place after the command line and the user's config files (`given_model`:
    their `model` section, merged). A `model_source` shortcut sets the source; a local directory given as the
    source without a name or family takes the directory's name and the checkpoint's own family. A name equal to
    the workflow's own default (`default_model`, from workflow/config/default.yaml, also when that file is passed
    with --configfile) does not count as given: the embedded model's name never labels another checkpoint."""
    given = dict(given_model or {})
    if default_model and given.get("name") == default_model.get("name"):
        given.pop("name")
    model = config["model"]
    if "model_source" in config:
        source = str(config.pop("model_source"))
        given["source"] = source
        model["source"] = source
        if source == RANDOM_GPT2:
            model.update(name=given.get("name", RANDOM_GPT2), family=given.get("family", "gpt2"))
            return
    directory = _local_dir(str(model.get("source", "")))
    if directory is None or "source" not in given:
        return
    model["source"] = str(directory)
    if "name" not in given:
        model["name"] = checkpoint_name(directory)
    if "family" not in given:
        family = checkpoint_family(model)
        if family:
            model["family"] = family


def check_no_other_model(model: dict, root: str | Path = ".") -> None:
    """Raise ConfigError if the outputs under this run's name were written for another model."""
    root = Path(root)
    name = str(model["name"])
    for folder in sorted([*root.glob(f"data/*/{name}"), *root.glob(f"figures/*/{name}")]):
        for side in sorted(folder.rglob("*.json")):
            try:
                other = recorded_model(json.loads(side.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
            if other is not None and not same_model(other, model):
                raise ConfigError(
                    f"config key 'model.name': {side.relative_to(root)} holds outputs of {describe_model(other)}, "
                    f"not of this run's {describe_model(model)}; fix: give this run its own name, e.g. "
                    f"--config 'model={{name: {name}-2}}', or delete the other model's outputs under data/*/{name} "
                    f"and figures/*/{name}")


def remove_own_orphan_sidecars(name: str, grid: str, root: str | Path = ".") -> list[Path]:
    """Remove the sidecars whose file is gone under data/*/NAME and figures/*/NAME (the model `name`'s folders) and
    the Min-IP grid `grid`'s folders (data/minip/GRID, figures/minip/GRID, figures/tables/minip/GRID); return the
    removed paths."""
    root = Path(root)
    folders = [*root.glob(f"data/*/{name}"), *root.glob(f"figures/*/{name}"),
               *(root / f / grid for f in ("data/minip", "figures/minip", "figures/tables/minip"))]
    return remove_orphan_sidecars(sorted({f for f in folders if f.is_dir()}))
