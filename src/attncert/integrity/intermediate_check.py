"""Checking an intermediate file against its sidecar before it is read.

Every intermediate `X` of the pipeline has a sidecar `X.json` recording the byte size and sha256 of `X`
as written (`attncert.provenance.provenance.write_sidecar`). A job that reads an intermediate written by
another job calls `verify_intermediate(X)` first; the shared loaders do (`extraction.load_layer`,
`head.units.load_specification`, `report_files.load_tables`), and so do the entry scripts that read a
table or record themselves. A missing file or sidecar, an unreadable sidecar, one without a checksum, or a
file whose size or sha256 differs from its sidecar's raises `IntermediateError`, and so does a file written
for another model: its sidecar names another model than the folder it sits in, or (once a job has declared
its model with `expect_model_of(params)`) another name, source or family than the job's, and a Min-IP file whose
sidecar names another grid (`minip.name`) than the folder it sits in. Its message is one line
naming the file and the Snakemake command that regenerates it; an entry script prints it and exits with
status 1, without a traceback (`attncert.provenance.job_log`).

Committed inputs (`data/prompts.txt`, `data/paper_claims.yaml`, ...) have no sidecar and are not checked.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from attncert.integrity.file_integrity import file_checksum, sidecar_path
from attncert.integrity.model_identity import describe_model, recorded_model, same_model

# The rule producing each kind of intermediate (paths relative to the working directory of the run, as
# in workflow/rules/*.smk; tests/integrity/test_intermediate_check.py checks this list against the rules).
PRODUCED_BY = (
    (r"data/extract/(?P<model>[^/]+)/layer\d+\.npz", "extract"),
    (r"data/certify/(?P<model>[^/]+)/layer\d+(_spec\.npz|_certificates\.npz|\.csv)", "certify_layer"),
    (r"data/baselines/(?P<model>[^/]+)/layer\d+\.csv", "baselines_layer"),
    (r"data/block/(?P<model>[^/]+)/transition\d+\.csv", "block_transition"),
    (r"data/block/(?P<model>[^/]+)/units\.csv", "block_merge"),
    (r"data/long_context/(?P<model>[^/]+)/layer_tokens\.npz", "long_context_extract"),
    (r"data/long_context/(?P<model>[^/]+)/parts/lengths\d+(-\d+)*_head\d+(_certificates\.npz|\.csv)",
     "long_context_certify"),
    (r"data/long_context/(?P<model>[^/]+)/units\.csv", "long_context_merge"),
    (r"data/long_context/(?P<model>[^/]+)/units_certificates\.npz", "long_context_merge"),
    (r"data/audit/(?P<model>[^/]+)/parts/(layer\d+|long_context|block)\.csv", "audit_certificates"),
    (r"data/audit/(?P<model>[^/]+)/certificate_records\.csv", "audit_certificates_merge"),
    (r"data/minip/(?P<grid>[^/]+)/witness_bound\.json", "minip_witness_bound"),
    (r"data/minip/(?P<grid>[^/]+)/constructions\.csv", "minip_constructions"),
    (r"data/minip/(?P<grid>[^/]+)/runs/[^/]+/[^/]+_s\d+\.json", "minip_train"),
    (r"data/minip/(?P<grid>[^/]+)/sweep\.csv", "minip_collect"),
    (r"figures/tables/(?P<model>[^/]+)/certify_measured\.json", "certify_table"),
    (r"figures/tables/(?P<model>[^/]+)/baselines_measured\.json", "baselines_table"),
    (r"figures/tables/(?P<model>[^/]+)/block_measured\.json", "block_table"),
    (r"figures/tables/(?P<model>[^/]+)/long_context_measured\.json", "long_context_report"),
    (r"figures/tables/[^/]+/method_checks_measured\.json", "certify_method_checks"),
    (r"figures/tables/minip/(?P<grid>[^/]+)/minip_measured\.json", "minip_measured"),
)

# Producing "rules" above that stand for a family of rules, one per group of jobs (workflow/rules/minip.smk:
# minip_train_{family}_{part}, which group depends on the config): no rule of that name to force, so the
# command forces the target's own job instead.
RULE_FAMILIES = frozenset({"minip_train"})


class IntermediateError(Exception):
    """An intermediate file that must not be read: missing, without a usable sidecar, or not the file its
    sidecar describes. The message is one line and ends with the command that regenerates the file."""


def _match(path: str | Path):
    posix = Path(path).as_posix()
    for pattern, rule in PRODUCED_BY:
        m = re.search(rf"(?:^|/)({pattern})$", posix)
        if m:
            return rule, m
    return None, None


def producing_rule(path: str | Path) -> tuple[str | None, str]:
    """(rule, target): the rule that writes `path` and the path as a Snakemake target (relative to the
    run's working directory); (None, path) for a path no rule is known to write."""
    rule, m = _match(path)
    return (rule, m.group(1)) if m else (None, Path(path).as_posix())


def path_model(path: str | Path) -> str | None:
    """The model name in the path of a model-specific intermediate (data/<stage>/NAME/...), else None."""
    _, m = _match(path)
    return m.group("model") if m and "model" in m.groupdict() else None


_expected_model: dict | None = None


def expect_model_of(params) -> None:
    """Declare the model of the running job (its `params.model`, if it has one): from now on every input
    whose sidecar records another model (name, source, family) is refused."""
    global _expected_model
    model = params.get("model") if isinstance(params, dict) else getattr(params, "model", None)
    _expected_model = dict(model) if isinstance(model, dict) else None


def path_grid(path: str | Path) -> str | None:
    """The Min-IP grid's name in the path of a Min-IP intermediate (data/minip/NAME/...), else None."""
    _, m = _match(path)
    return m.group("grid") if m and "grid" in m.groupdict() else None


def _check_model(path: Path, record: dict, side: Path) -> None:
    grid, params = path_grid(path), record.get("params")
    written_grid = params.get("grid") if isinstance(params, dict) else None
    if grid is not None and written_grid is not None and str(written_grid) != grid:
        raise _fail(path, f"was written for the Min-IP grid {written_grid}, not {grid} (its sidecar {side.name} says)")
    written = recorded_model(record)
    name = written["name"] if written else record.get("model_id")
    folder = path_model(path)
    if folder is not None and name is not None and str(name) != folder:
        raise _fail(path, f"was written for model {name}, not {folder} (its sidecar {side.name} says so)")
    if written is not None and _expected_model is not None and not same_model(written, _expected_model):
        raise _fail(
            path, f"was written for {describe_model(written)}, not for this run's {describe_model(_expected_model)}"
        )


def regenerate_command(path: str | Path) -> str:
    """The command that rewrites `path` even though it exists (run in the pipeline's working directory):
    `--forcerun` its producing rule, or `--force` the target itself (an unknown file, or a rule family).
    The target comes before `--forcerun`, which takes every word after it as a rule name."""
    rule, target = producing_rule(path)
    if rule is None or rule in RULE_FAMILIES:
        return f"snakemake --cores all --force {target}"
    return f"snakemake --cores all {target} --forcerun {rule}"


def _fail(path: Path, problem: str) -> IntermediateError:
    line = " ".join(f"{path} {problem}: regenerate it with: {regenerate_command(path)}".split())
    return IntermediateError(line)


def verify_intermediate(path: str | Path) -> Path:
    """`path` if it is the file its sidecar describes (size and sha256), else raise `IntermediateError`."""
    path = Path(path)
    side = sidecar_path(path)
    if not path.is_file():
        raise _fail(path, "is missing")
    if not side.is_file():
        raise _fail(path, f"cannot be checked (its sidecar {side.name} is missing)")
    try:
        record = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise _fail(path, f"cannot be checked (its sidecar {side.name} is unreadable: {e})") from None
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str) \
            or not isinstance(record.get("size_bytes"), int):
        raise _fail(path, f"cannot be checked (its sidecar {side.name} records no sha256 and size)")
    _check_model(path, record, side)
    size = path.stat().st_size
    if size != record["size_bytes"]:
        raise _fail(path, f"is corrupted ({size} bytes, its sidecar {side.name} records {record['size_bytes']})")
    if file_checksum(path)["sha256"] != record["sha256"]:
        raise _fail(path, f"is corrupted (sha256 differs from its sidecar {side.name})")
    return path
