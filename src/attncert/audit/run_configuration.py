"""The run's recorded configuration: what the audit checks a run against.

The workflow writes `data/run/{model}/config.yaml` (rule `run_configuration`): the configuration Snakemake merged
(default file, --configfile files, --config overrides) and a `resolved` section with the lists it resolved for the
model (`layers`, `heads`, `block_transitions`; "all" in a configuration becomes the model's own). The audit reads
it, so that `attncert audit --model M` checks every unit of the run without being told its configuration; a
configuration given with --configfile replaces it (its `resolved` lists are then taken from the recorded file when
there is one, else from the extraction files on disk).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from attncert.integrity.file_integrity import atomic_path
from attncert.integrity.intermediate_check import IntermediateError, verify_intermediate


class RunConfigurationError(Exception):
    """The run's configuration cannot be read: one line, naming the fix."""


def run_configuration_path(root: Path, model: str) -> Path:
    return Path(root) / "run" / model / "config.yaml"


def write_run_configuration(path: str | Path, config: dict, resolved: dict) -> None:
    record = {**config, "resolved": {k: [int(x) for x in v] for k, v in resolved.items()}}
    with atomic_path(path) as tmp:
        Path(tmp).write_text(yaml.safe_dump(record, sort_keys=True))


def read_run_configuration(root: Path, model: str) -> dict:
    """The recorded configuration of the run under `root` for `model` (checked against its sidecar)."""
    path = run_configuration_path(root, model)
    try:
        verify_intermediate(path)
    except IntermediateError as e:
        raise RunConfigurationError(f"{e}; or pass the run's configuration with --configfile FILE") from None
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise RunConfigurationError(f"{path} does not read as a configuration ({type(e).__name__}); fix: "
                                    f"regenerate it with: snakemake --cores all {path}") from None
    if not isinstance(config, dict) or (config.get("model") or {}).get("name") != model:
        raise RunConfigurationError(f"{path} is not the configuration of a run of model {model!r}; fix: regenerate "
                                    f"it with: snakemake --cores all {path}")
    return config
