"""Validation of the pipeline configuration, with one-line errors that name the key and the fix.

`validate_config` is called by the Snakefile at parse time (so `snakemake -n` already fails on a
malformed config) and by the tests. It runs the JSON schema (`workflow/config/schema.yaml`, through
`snakemake.utils.validate`, which also fills defaults; `config_schema` converts command-line strings, finds
unknown keys and writes each error's fix from the schema) and then the checks a schema cannot express:
the prompt file exists and has enough prompts, query positions fit in `max_tokens`, layer/head
indices exist in the model. Their fixes are stated in the schema too (`x-fix`, read by `config_schema.check_fix`),
so every fix of a configuration error comes from `workflow/config/schema.yaml`.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from attncert.configuration.config_schema import (SCHEMA_PATH, check_fix, coerce, describe, load_schema, node_at,
                                                  unknown_key)
from attncert.model.model_source import RANDOM_GPT2, ModelSourceError, check_tokenizer, checkpoint_family, model_shape


class ConfigError(ValueError):
    """A configuration problem; the message is one line naming the key and the fix."""


def _key_path(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _schema_error(err, schema: dict) -> ConfigError:
    """Turn a jsonschema ValidationError into one line: key, problem, and a fix generated from the schema."""
    path = list(err.absolute_path)
    fix = f"use {describe(node_at(path, schema), schema)}"
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        path = path + [missing]
        fix = f"add '{missing}': {describe(node_at(path, schema), schema)} (see workflow/config/default.yaml)"
    problem = err.message.replace("\n", " ")
    if len(problem) > 160:
        problem = problem[:157] + "..."
    return ConfigError(f"config key '{_key_path(path)}': {problem}; fix: {fix}")


def _check_error(key: str, problem: str, check: str, /, **values) -> ConfigError:
    """One line: the key, the problem a check found, and the fix the schema states for that check (`x-fix`),
    its `{name}` fields filled from `values`."""
    fix = check_fix(key.split("."), check, load_schema()).format(**values)
    return ConfigError(f"config key '{key}': {problem}; fix: {fix}")


def _unknown_key_error(found) -> ConfigError:
    key, close, valid = found
    where = key.rsplit(".", 1)[0] + "." if "." in key else ""
    if close:
        return ConfigError(f"config key '{key}' is not a configuration key (did you mean '{where}{close}'?); "
                           f"fix: use '{where}{close}' (workflow/config/README.md lists every key)")
    return ConfigError(f"config key '{key}' is not a configuration key (valid keys here: {', '.join(valid)}); "
                       f"fix: remove it or use one of those (workflow/config/README.md lists every key)")


def schema_validate(config: dict, schema_path: Path = SCHEMA_PATH) -> None:
    """Validate `config` against the JSON schema in place: command-line strings become the numbers the schema
    asks for, an unknown key is an error naming the closest valid one, defaults are filled; raise ConfigError."""
    import jsonschema

    schema = load_schema(schema_path)
    config.update(coerce(config, schema, schema))
    found = unknown_key(config, schema)
    if found:
        raise _unknown_key_error(found)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(list(e.absolute_path)), str(e.absolute_path)))
    if errors:
        raise _schema_error(errors[-1] if errors[0].validator == "oneOf" and len(errors) > 1 else errors[0], schema)
    try:  # snakemake's own validator fills the schema defaults into the config
        from snakemake.utils import validate as snakemake_validate

        snakemake_validate(config, str(schema_path), set_default=True)
    except ImportError:  # pragma: no cover - snakemake is a hard dependency of the pipeline
        pass


def read_prompts(path: str | Path, n_prompts: int) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise _check_error("prompts", f"file {str(p)!r} does not exist", "exists")
    prompts = [line.strip() for line in p.read_text().splitlines() if line.strip()]
    if len(prompts) < n_prompts:
        raise _check_error("n_prompts", f"{n_prompts} prompts requested but {str(p)!r} has {len(prompts)}",
                           "enough_prompts")
    return prompts[:n_prompts]


def validate_config(config: dict, base_dir: str | Path = ".", check_model: bool = True) -> dict:
    """Validate a pipeline config in place (schema + semantic checks) and return it."""
    schema_validate(config)
    read_prompts(Path(base_dir) / config["prompts"], config["n_prompts"])
    for section in ("certify", "baselines"):
        for qp in config[section]["query_positions"]:
            if qp >= config["max_tokens"]:
                raise _check_error(f"{section}.query_positions", f"position {qp} >= max_tokens {config['max_tokens']}",
                                   "below_max_tokens")
    for section in ("certify", "baselines"):
        bad = [q for q in config[section].get("prompts", []) if q >= config["n_prompts"]]
        if bad:
            raise _check_error(f"{section}.prompts", f"prompt {bad[0]} >= n_prompts {config['n_prompts']}",
                               "below_n_prompts")
    cert, base = config["certify"], config["baselines"]
    _check_model_and_varying(config)
    for key in ("radii", "query_positions", "norms", "modes", "prompts"):
        c_vals = cert.get(key, list(range(config["n_prompts"]))) if key == "prompts" else cert[key]
        b_vals = base.get(key, list(range(config["n_prompts"]))) if key == "prompts" else base[key]
        extra = [v for v in b_vals if v not in c_vals]
        if extra:
            raise _check_error(f"baselines.{key}", f"{extra[0]!r} is not in certify.{key}", "subset_of_certify")
    block = config["block"]
    if block["query_position"] >= config["max_tokens"]:
        raise _check_error("block.query_position", f"{block['query_position']} >= max_tokens {config['max_tokens']}",
                           "below_max_tokens")
    if block["prompt"] >= config["n_prompts"]:
        raise _check_error("block.prompt", f"{block['prompt']} >= n_prompts {config['n_prompts']}", "below_n_prompts")
    if check_model:
        try:
            shape = model_shape(config["model"])
            family = checkpoint_family(config["model"])
            check_tokenizer(config["model"])
        except ModelSourceError as e:
            raise ConfigError(str(e)) from None
        if family is not None and family != config["model"]["family"]:
            raise _check_error("model.family", f"{config['model']['family']!r} but the checkpoint "
                               f"{config['model']['source']} is a {family!r} model", "checkpoint", family=family)
        if shape is not None:
            n_layers, n_heads, positions = shape
            if config["max_tokens"] > positions:
                raise _check_error("max_tokens", f"{config['max_tokens']} exceeds the model's {positions} positions",
                                   "within_positions", positions=positions)
            for key, limit in (("layers", n_layers), ("heads", n_heads)):
                sel = config[key]
                if sel != "all":
                    bad = [i for i in sel if i >= limit]
                    if bad:
                        raise _check_error(key, f"index {bad[0]} out of range, the model has {limit}", "in_model",
                                           last=limit - 1)
    return config


def fit_to_model(config: dict, defaults: dict) -> str:
    """Fit the long-context experiment to the model, in place, before any job runs (workflow/config/README.md,
    "What a small checkpoint needs"): a layer, heads or lengths the model lacks, and a causal model's query
    position, are fitted when they hold the workflow's default (`defaults`: workflow/config/default.yaml) and
    refused (ConfigError, one line naming the fix) when the user set them otherwise. A causal model's query is
    `last` (T - 1): at a fixed index every length would attend the same few keys. Returns the log line of what
    was fitted ("" when nothing was)."""
    lc, shape = config.get("long_context"), model_shape(config["model"])
    if not lc or shape is None:
        return ""
    n_layers, n_heads, positions = shape
    causal = config["model"]["family"] == "gpt2"
    fitted = {"layer": min(lc["layer"], n_layers - 1), "heads": [h for h in lc["heads"] if h < n_heads] or [0],
              "lengths": [t for t in lc["lengths"] if t <= positions] or [positions],
              "query_position": "last" if causal else lc["query_position"]}
    default = defaults.get("long_context") or {}
    unfit = {key for key, value in fitted.items() if value != lc[key] and lc[key] != default.get(key)}  # user's
    if "layer" in unfit:
        raise _check_error("long_context.layer", f"layer {lc['layer']} out of range, the model has {n_layers} layers",
                           "in_model", last=n_layers - 1)
    if "heads" in unfit:
        raise _check_error("long_context.heads", f"head {max(lc['heads'])} out of range, the model has {n_heads} heads",
                           "in_model", last=n_heads - 1)
    if "lengths" in unfit:
        raise _check_error("long_context.lengths", f"length {max(lc['lengths'])} exceeds the model's {positions} "
                           "positions", "within_positions", positions=positions)
    if "query_position" in unfit:
        raise _check_error("long_context.query_position", f"index {lc['query_position']} on a causal model attends "
                           f"{lc['query_position'] + 1} keys at every length", "causal_last")
    changes = [f"{key} {lc[key]} -> {value}" for key, value in fitted.items() if value != lc[key]]
    lc.update(fitted)
    if lc["query_position"] != "last" and lc["query_position"] >= min(lc["lengths"]):
        raise _check_error("long_context.query_position", f"{lc['query_position']} >= the shortest length "
                           f"{min(lc['lengths'])}", "below_lengths")
    if not changes:
        return ""
    return (f"long_context fitted to the model ({n_layers} layers, {n_heads} heads, {positions} positions"
            f"{', causal' if causal else ''}): {'; '.join(changes)} (set them with --config 'long_context={{...}}')")


def _check_model_and_varying(config: dict) -> None:
    """random-gpt2 is labelled synthetic; certify.varying restricts the certification grid and holds
    every varying-query baseline unit."""
    model = config["model"]
    if model["source"] == RANDOM_GPT2:
        if model["family"] != "gpt2":
            raise _check_error("model.family", f"{model['family']!r} but source 'random-gpt2' is GPT-2-shaped",
                               "random_gpt2")
        if not any(w in model["name"].lower() for w in ("random", "synthetic")):
            raise _check_error("model.name", f"{model['name']!r} would present the synthetic random-gpt2 as a "
                               "real model", "synthetic_label")
    cert, base = config["certify"], config["baselines"]
    varying = cert.get("varying") or {}
    for key in ("query_positions", "radii"):
        extra = [v for v in varying.get(key, []) if v not in cert[key]]
        if extra:
            raise _check_error(f"certify.varying.{key}", f"{extra[0]!r} is not in certify.{key}", "in_certify_grid",
                               key=key)
        if "varying" in base["modes"] and key in varying:
            missing = [v for v in base[key] if v not in varying[key]]
            if missing:
                raise _check_error(f"baselines.{key}", f"{missing[0]!r} is not in certify.varying.{key}",
                                   "varying_certified", key=key)


def selected(config: dict, key: str, count: int) -> list[int]:
    sel = config[key]
    return list(range(count)) if sel == "all" else list(sel)


def config_hash(config: dict) -> str:
    """A stable short hash of the configuration (provenance of every intermediate)."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
