"""What the configuration schema (`workflow/config/schema.yaml`) says, read for three purposes:

- `coerce`: Snakemake parses `--config key=value` with YAML's base loader, so a number or a boolean inside a
  nested or list value (`--config 'certify={radii: [0.001]}'`, `--config 'layers=[2]'`) arrives as a string.
  Every string sitting where the schema wants a number, an integer or a boolean is converted; anything
  else is left for the validator to reject.
- `unknown_key`: the first key, at any depth, that the schema does not define, with the closest valid key
  (`difflib`), so a misspelt key (`modle_source`, `modle:` in a config file) is an error, never ignored.
- `describe`: the fix text of a validation error, generated from the schema node of the offending key
  (type, bounds, allowed values, list size), so it cannot go stale when the schema changes.
- `check_fix`: the fix of a check the schema cannot express (two keys together, the prompts file, the model),
  as the schema states it under the custom keyword `x-fix: {check: fix}` at the key or the nearest section
  above it; jsonschema and Snakemake's validator ignore the keyword.
"""
from __future__ import annotations

import difflib
from pathlib import Path

import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "workflow" / "config" / "schema.yaml"


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    return yaml.safe_load(Path(path).read_text())


def resolve(node: dict, schema: dict) -> dict:
    """`node` with a local `$ref` (`#/definitions/x`) followed."""
    while isinstance(node, dict) and "$ref" in node:
        target = schema
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node if isinstance(node, dict) else {}


def node_at(path, schema: dict) -> dict:
    """The schema node of the config entry at `path` (keys and list indices), or {} when there is none."""
    node = resolve(schema, schema)
    for part in path:
        if isinstance(part, int):
            branches = [resolve(b, schema) for b in node.get("oneOf", node.get("anyOf", [node]))]
            node = next((resolve(b["items"], schema) for b in branches if isinstance(b.get("items"), dict)), {})
        else:
            node = resolve((node.get("properties") or {}).get(part, {}), schema)
    return node


def check_fix(path, check: str, schema: dict) -> str:
    """The fix text (`x-fix`) the schema states for `check` on the key at `path`: on the key's own node (as written,
    then with its `$ref` followed), else on the nearest section above it."""
    for depth in range(len(path), -1, -1):
        here = node_at(path[:depth - 1], schema).get("properties", {}).get(path[depth - 1], {}) if depth else schema
        for node in (here, resolve(here, schema)):
            fix = (node.get("x-fix") or {}).get(check)
            if fix:
                return fix
    raise KeyError(f"the schema states no x-fix '{check}' for {'.'.join(map(str, path))} or a section above it")


def _valid(value, node: dict, schema: dict) -> bool:
    import jsonschema

    return jsonschema.Draft202012Validator({**node, "definitions": schema.get("definitions", {})}).is_valid(value)


def _scalar(text: str, kind: str):
    """The number, integer or boolean a command-line string stands for, or `text` itself when it is none."""
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            value = float(text)
            return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
    except ValueError:
        pass
    return text


def coerce(value, node: dict, schema: dict):
    """`value` with every string converted that the schema `node` (and its sub-nodes) wants as a number,
    integer or boolean."""
    node = resolve(node, schema)
    branches = node.get("oneOf") or node.get("anyOf")
    if branches:
        if any(_valid(value, resolve(b, schema), schema) for b in branches):
            return value
        for b in branches:
            converted = coerce(value, b, schema)
            if _valid(converted, resolve(b, schema), schema):
                return converted
        return value
    kind = node.get("type")
    if isinstance(value, str) and kind in ("number", "integer", "boolean"):
        return _scalar(value, kind)
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [coerce(v, node["items"], schema) for v in value]
    if isinstance(value, dict) and "properties" in node:
        props = node["properties"]
        return {k: coerce(v, props[k], schema) if k in props else v for k, v in value.items()}
    return value


def unknown_key(config, schema: dict, node: dict | None = None, path: tuple = ()):
    """(dotted path of the first key the schema does not define, the closest valid key or None, the valid
    keys at that level), or None when every key is defined."""
    node = resolve(schema if node is None else node, schema)
    if isinstance(config, dict) and "properties" in node:
        props = node["properties"]
        for key in config:
            if key not in props:
                if node.get("additionalProperties", True) is not False:
                    continue
                close = difflib.get_close_matches(str(key), list(props), n=1, cutoff=0.6)
                return ".".join(map(str, path + (key,))), close[0] if close else None, sorted(props)
            found = unknown_key(config[key], schema, props[key], path + (key,))
            if found:
                return found
    elif isinstance(config, list) and isinstance(node.get("items"), dict):
        for i, item in enumerate(config):
            found = unknown_key(item, schema, node["items"], path + (i,))
            if found:
                return found
    return None


def _bounds(node: dict) -> str:
    parts = []
    for key, sign in (("exclusiveMinimum", ">"), ("minimum", ">="), ("exclusiveMaximum", "<"), ("maximum", "<=")):
        if key in node:
            parts.append(f"{sign} {node[key]}")
    return " and ".join(parts)


def describe(node: dict, schema: dict) -> str:
    """What a valid value of `node` looks like, in words (the `fix:` of an error)."""
    node = resolve(node, schema)
    branches = node.get("oneOf") or node.get("anyOf")
    if branches:
        return " or ".join(describe(b, schema) for b in branches)
    if "enum" in node:
        values = node["enum"]
        return f"'{values[0]}'" if len(values) == 1 else f"one of [{', '.join(map(str, values))}]"
    kind = node.get("type")
    if kind in ("number", "integer"):
        text = "a whole number" if kind == "integer" else "a number"
        return f"{text} {_bounds(node)}".strip()
    if kind == "boolean":
        return "true or false"
    if kind == "string":
        if "pattern" in node:
            return f"a string matching {node['pattern']}"
        return "a non-empty string" if node.get("minLength") else "a string"
    if kind == "array":
        lo, hi = node.get("minItems"), node.get("maxItems")
        if lo is not None and lo == hi:
            text = f"a list of {lo}"
        elif lo == 1:
            text = "a non-empty list"
        else:
            text = f"a list of at least {lo}" if lo else "a list"
        if node.get("uniqueItems"):
            text += " without repeats"
        items = node.get("items")
        return f"{text}, each {describe(items, schema)}" if isinstance(items, dict) else text
    if kind == "object":
        required = node.get("required") or []
        keys = ", ".join(required) if required else ", ".join(sorted(node.get("properties") or {}))
        return f"a mapping with the keys {keys}" if keys else "a mapping"
    return "a value as in workflow/config/default.yaml"
