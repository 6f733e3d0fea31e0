"""workflow/config/README.md documents every key of workflow/config/schema.yaml with the schema's default."""
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "workflow" / "config" / "schema.yaml").read_text())
REFERENCE = (REPO / "workflow" / "config" / "README.md").read_text()


def schema_keys(node=SCHEMA, prefix="") -> dict[str, dict]:
    """{dotted key: its schema node}; items of an array of objects appear as `key[].sub`."""
    out = {}
    for key, sub in (node.get("properties") or {}).items():
        path = f"{prefix}{key}"
        out[path] = {**sub, "_required": key in node.get("required", [])}
        out.update(schema_keys(sub, path + "."))
        if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
            out.update(schema_keys(sub["items"], path + "[]."))
    return out


def reference_rows() -> dict[str, str]:
    """{key: default cell} of the reference's tables."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `([^`]+)` \| ([^|]+) \|", REFERENCE, re.M)}


def test_every_schema_key_is_documented_with_its_default():
    rows = reference_rows()
    keys = schema_keys()
    missing = sorted(set(keys) - set(rows))
    assert not missing, f"workflow/config/README.md lacks {missing}"
    assert not sorted(set(rows) - set(keys)), f"documented but not in the schema: {sorted(set(rows) - set(keys))}"
    for key, node in keys.items():
        cell = rows[key]
        if "default" in node:
            assert yaml.safe_load(cell.strip("`")) == node["default"], (key, cell, node["default"])
        elif node["_required"]:
            assert cell == "required", (key, cell)
        else:
            assert cell.startswith("optional"), (key, cell)


def test_the_walker_sees_nested_and_array_keys():
    keys = schema_keys()
    assert {"model.source", "certify.method_checks.seed", "minip.scaling.lengths[].ranks", "device"} <= set(keys)


def _unset_in(cfg: dict, default: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in default.items():
        if key not in cfg:
            out.append(prefix + key)
        elif isinstance(value, dict) and isinstance(cfg[key], dict):
            out += _unset_in(cfg[key], value, f"{prefix}{key}.")
    return out


def test_paper_config_sets_every_key_of_the_default():
    """Snakemake reads default.yaml (the Snakefile's configfile) and merges `--configfile paper.yaml` into it:
    a key paper.yaml leaves out keeps the default's value (the default certifies 2 prompts, the paper 5)."""
    default = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
    paper = yaml.safe_load((REPO / "workflow" / "config" / "paper.yaml").read_text())
    assert _unset_in(paper, default) == []
