"""One source for every default: the config schema. Code defaults that mirror a config key equal the
schema's default, and the default configuration does not restate a schema default with another value."""
import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml

from attncert.baselines import linear_bound_baselines as lbb
from attncert.block.residual import analyze_transition
from attncert.certify.run import certify_unit

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "workflow" / "config" / "schema.yaml").read_text())


def schema_defaults(node=SCHEMA, prefix="") -> dict[str, object]:
    """{dotted key: default} of every schema property that declares a default."""
    out = {}
    for key, sub in (node.get("properties") or {}).items():
        path = f"{prefix}{key}"
        if "default" in sub:
            out[path] = sub["default"]
        out.update(schema_defaults(sub, path + "."))
    return out


DEFAULTS = schema_defaults()


def _param_default(fn, name):
    return inspect.signature(fn).parameters[name].default


def _norm(v):
    return list(v) if isinstance(v, tuple) else v


# (config key, where the code declares the same default, that default)
CODE_DEFAULTS = [
    ("certify.ascent_restarts", "certify_unit", _param_default(certify_unit, "ascent_restarts")),
    ("certify.ascent_steps", "certify_unit", _param_default(certify_unit, "ascent_steps")),
    ("certify.seed", "certify_unit", _param_default(certify_unit, "seed")),
    ("certify.second_order", "certify_unit", _param_default(certify_unit, "second_order")),
    ("certify.tight", "certify_unit", _param_default(certify_unit, "tight")),
    ("certify.ascent_check_fraction", "certify_unit", _param_default(certify_unit, "ascent_check_fraction")),
    ("device", "certify_unit", _param_default(certify_unit, "device")),
    ("block.qp_starts", "analyze_transition", _param_default(analyze_transition, "qp_starts")),
    ("block.sdp_iterations", "analyze_transition", _param_default(analyze_transition, "sdp_iterations")),
    ("block.ascent_restarts", "analyze_transition", _param_default(analyze_transition, "ascent_restarts")),
    ("block.ascent_steps", "analyze_transition", _param_default(analyze_transition, "ascent_steps")),
    ("block.seed", "analyze_transition", _param_default(analyze_transition, "seed")),
    ("block.sdp_rounding_starts", "analyze_transition", _param_default(analyze_transition, "sdp_rounding_starts")),
    ("block.alpha_crown", "analyze_transition", _param_default(analyze_transition, "alpha_crown")),
] + [
    (f"baselines.alpha_{key}", "baseline_upper_bounds", _param_default(lbb.baseline_upper_bounds, f"alpha_{key}"))
    for key in ("iterations", "tolerance", "patience", "lr", "betas")
] + [
    (f"baselines.alpha_{key}", f"alpha_crown_upper({arg})", _param_default(lbb.alpha_crown_upper, arg))
    for key, arg in (("iterations", "iterations"), ("tolerance", "tolerance"), ("patience", "patience"),
                     ("lr", "lr"), ("betas", "betas"))
] + [
    (f"baselines.alpha_{field.name}", f"AlphaSettings.{field.name}", field.default)
    for field in dataclasses.fields(lbb.AlphaSettings)
]


@pytest.mark.parametrize("key,where,value", CODE_DEFAULTS, ids=[f"{k}@{w}" for k, w, _ in CODE_DEFAULTS])
def test_code_default_equals_the_schema_default(key, where, value):
    assert key in DEFAULTS, f"the schema declares no default for {key} (code {where}: {value!r})"
    assert _norm(value) == _norm(DEFAULTS[key]), f"{where}: {value!r}, schema {key}: {DEFAULTS[key]!r}"


def test_the_alpha_settings_cover_the_schema_keys():
    fields = {f"baselines.alpha_{f.name}" for f in dataclasses.fields(lbb.AlphaSettings)}
    assert fields == {k for k in DEFAULTS if k.startswith("baselines.alpha_")}


def _get(cfg, dotted):
    for part in dotted.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return None, False
        cfg = cfg[part]
    return cfg, True


def test_default_config_never_overrides_a_schema_default():
    cfg = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
    for key, default in DEFAULTS.items():
        value, present = _get(cfg, key)
        if present:
            assert _norm(value) == _norm(default), f"default.yaml {key}: {value!r}, schema default {default!r}"


def test_schema_defaults_are_found():  # guards the walker itself
    assert DEFAULTS["certify.ascent_restarts"] and DEFAULTS["baselines.alpha_betas"] and "device" in DEFAULTS
