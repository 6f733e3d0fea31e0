"""Config validation: each malformed config fails at parse time with one line naming key and fix."""
import copy
import os
import subprocess

import pytest
import yaml

from attncert.model.model_source import ModelSourceError, check_reachable
from attncert.configuration.config import ConfigError, validate_config

from conftest import REPO, SNAKEMAKE

DEFAULT = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
PAPER = yaml.safe_load((REPO / "workflow" / "config" / "paper.yaml").read_text())


def _bad(mutate):
    cfg = copy.deepcopy(DEFAULT)
    mutate(cfg)
    return cfg


BAD_CASES = {
    "unknown model family": (lambda c: c["model"].update(family="llama"), "model.family", "gpt2"),
    "radius zero": (lambda c: c["certify"].update(radii=[0.001, 0.0]), "certify.radii.1", "> 0"),
    "radius negative": (lambda c: c["baselines"].update(radii=[-0.01]), "baselines.radii.0", "> 0"),
    "empty prompt list": (lambda c: c.update(prompts="tests/data/empty_prompts.txt"), "n_prompts", "add prompts"),
    "zero prompts": (lambda c: c.update(n_prompts=0), "n_prompts", "whole number"),
    "head out of range": (lambda c: c.update(heads=[0, 12]), "heads", "0..11"),
    "layer out of range": (lambda c: c.update(layers=[6]), "layers", "0..5"),
    "query position beyond prompt": (
        lambda c: c["certify"].update(query_positions=[99]),
        "certify.query_positions",
        "max_tokens",
    ),
    "missing section": (lambda c: c.pop("certify"), "certify", "add 'certify'"),
    "unknown norm": (lambda c: c["certify"].update(norms=["l3"]), "certify.norms.0", "linf, l2"),
}


def test_default_and_paper_configs_are_valid():
    validate_config(copy.deepcopy(DEFAULT), base_dir=REPO)
    validate_config(copy.deepcopy(PAPER), base_dir=REPO)  # GPT-2 dims are known without the hub
    assert len(PAPER["certify"]["query_positions"]) == 4 and 4 in PAPER["certify"]["query_positions"]
    assert len(PAPER["certify"]["radii"]) == 6
    assert {0.001, 0.002, 0.01, 0.02} <= set(PAPER["certify"]["radii"])
    assert PAPER["n_prompts"] == 5


def test_command_line_model_numbers_are_numbers():
    """`--config model='{..., seed: 0, init_std: 0.08}'` hands the nested values over as strings (Snakemake parses
    them with YAML's base loader); they are converted, and a non-number still fails the schema."""
    from snakemake.cli import parse_config

    cfg = copy.deepcopy(PAPER)
    cfg["model"] = parse_config(["model={name: random-gpt2, family: gpt2, source: random-gpt2, seed: 0, "
                                 "init_std: 0.08}"])["model"]
    assert cfg["model"]["init_std"] == "0.08"  # what Snakemake passes
    validate_config(cfg, base_dir=REPO)
    assert cfg["model"]["init_std"] == 0.08 and cfg["model"]["seed"] == 0
    bad = copy.deepcopy(PAPER)
    bad["model"] = dict(cfg["model"], init_std="wide")
    with pytest.raises(ConfigError, match="init_std"):
        validate_config(bad, base_dir=REPO)


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_config_one_line(case):
    mutate, key, fix = BAD_CASES[case]
    with pytest.raises(ConfigError) as info:
        validate_config(_bad(mutate), base_dir=REPO)
    msg = str(info.value)
    assert "\n" not in msg
    assert f"'{key}" in msg, msg
    assert "fix:" in msg and fix in msg, msg


def _run_snakemake(args, env_extra=None, cwd=REPO):
    env = dict(os.environ, HF_HUB_OFFLINE="1", **(env_extra or {}))
    return subprocess.run([SNAKEMAKE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_snakemake_rejects_bad_config_at_parse_time(tmp_path):
    cfg = _bad(lambda c: c["certify"].update(radii=[-0.5]))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = _run_snakemake(["-n", "--cores", "1", "--configfile", str(path)])
    assert res.returncode != 0
    lines = [l for l in (res.stdout + res.stderr).splitlines() if l.startswith("attncert:")]
    assert len(lines) == 1 and "certify.radii.0" in lines[0] and "fix:" in lines[0], res.stderr[-2000:]


def test_unreachable_gpt2_message():
    with pytest.raises(ModelSourceError) as info:
        check_reachable({"name": "gpt2", "family": "gpt2", "source": "gpt2"})
    msg = str(info.value)
    assert "\n" not in msg and "embedded" in msg and "model_source=DIR" in msg


def test_missing_weight_directory_message():
    with pytest.raises(ConfigError, match="does not exist; fix"):
        validate_config(_bad(lambda c: c["model"].update(source="/nonexistent/gpt2")), base_dir=REPO)


@pytest.mark.slow
def test_unreachable_gpt2_stops_the_run_before_any_job(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prompts.txt").write_text((REPO / "data" / "prompts.txt").read_text())
    res = _run_snakemake(["--cores", "1", "--configfile", str(REPO / "workflow" / "config" / "paper.yaml"),
                          "--directory", str(tmp_path), "--snakefile", str(REPO / "Snakefile"),
                          "data/extract/gpt2/layer0.npz"])
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "cannot be loaded" in out and "model_source=DIR" in out
    assert not (tmp_path / "data" / "extract").exists()


def _with_command_line(*entries, base=DEFAULT):
    """The config Snakemake hands the Snakefile for `--config ENTRIES` (its own parser and merge)."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config

    cfg = copy.deepcopy(base)
    update_config(cfg, parse_config(list(entries)))
    return cfg


def test_nested_and_list_values_from_the_command_line_take_the_schema_types():
    cfg = _with_command_line("certify={radii: [0.001], tight: false}", "baselines={radii: [0.001]}", "layers=[2]",
                             "block={radii: [1e-4, 0.003]}")
    assert cfg["certify"]["radii"] == ["0.001"] and cfg["layers"] == ["2"]  # what Snakemake passes
    validate_config(cfg, base_dir=REPO)
    assert cfg["certify"]["radii"] == [0.001] and cfg["baselines"]["radii"] == [0.001]
    assert cfg["certify"]["tight"] is False and cfg["layers"] == [2] and cfg["block"]["radii"] == [0.0001, 0.003]
    assert cfg["certify"]["norms"] == DEFAULT["certify"]["norms"]  # the rest of the section is kept


UNKNOWN_KEYS = {
    "misspelt shortcut on the command line": (["modle_source=/x"], "modle_source", "'model_source'"),
    "misspelt section in a config file": ([], "modle", "'model'"),
    "misspelt nested key": (["certify={radi: [0.001]}"], "certify.radi", "'certify.radii'"),
    "misspelt key two levels down": (["minip={witness: {bitz: 24}}"], "minip.witness.bitz", "'minip.witness.bits'"),
    "unknown key of the block section": (["block={seeds: 1}"], "block.seeds", "'block.seed'"),
}


@pytest.mark.parametrize("case", sorted(UNKNOWN_KEYS))
def test_an_unknown_key_anywhere_names_the_closest_valid_key(case):
    entries, key, closest = UNKNOWN_KEYS[case]
    cfg = _with_command_line(*entries)
    if not entries:
        cfg["modle"] = {"name": "x"}  # as a `--configfile` would add it
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, base_dir=REPO)
    msg = str(info.value)
    assert (
        "\n" not in msg and f"'{key}'" in msg and f"did you mean {closest}?" in msg and f"fix: use {closest}" in msg
    ), msg


def test_every_fix_is_written_from_the_schema(tmp_path):
    """The fix names exactly what the schema allows: all the baseline methods, a list of prompt indices for
    `certify.prompts` (not the prompts file), and it follows an edit of the schema."""
    from attncert.configuration.config import schema_validate

    schema = yaml.safe_load((REPO / "workflow" / "config" / "schema.yaml").read_text())
    methods = schema["properties"]["baselines"]["properties"]["methods"]["items"]["enum"]
    with pytest.raises(ConfigError) as info:
        validate_config(_bad(lambda c: c["baselines"].update(methods=["crwn"])), base_dir=REPO)
    fix = str(info.value).split("fix: ")[1]
    assert all(m in fix for m in methods) and fix.count(",") == len(methods) - 1, fix
    with pytest.raises(ConfigError) as info:
        validate_config(_with_command_line("certify={prompts: [first]}"), base_dir=REPO)
    assert "certify.prompts.0" in str(info.value) and "whole number >= 0" in str(info.value)
    assert "text file" not in str(info.value)
    schema["properties"]["baselines"]["properties"]["methods"]["items"]["enum"] = ["ibp", "newbound"]
    edited = tmp_path / "schema.yaml"
    edited.write_text(yaml.safe_dump(schema))
    with pytest.raises(ConfigError, match=r"fix: use one of \[ibp, newbound\]"):
        schema_validate(_bad(lambda c: c["baselines"].update(methods=["crwn"])), edited)


@pytest.mark.slow
def test_snakemake_takes_list_overrides_and_rejects_unknown_keys(tmp_path):
    (tmp_path / "data").mkdir()
    for f in ("prompts.txt", "paper_claims.yaml", "long_context_passage.txt"):
        (tmp_path / "data" / f).write_text((REPO / "data" / f).read_text())
    where = ["--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile",
             str(REPO / "workflow" / "config" / "default.yaml")]  # followed by --config
    ok = _run_snakemake(
        [
            "data/certify/all-MiniLM-L6-v2/layer2.csv",
            "-n",
            "--cores",
            "1",
            *where,
            "--config",
            "layers=[2]",
            "certify={radii: [0.001], modes: [fixed]}",
            "baselines={radii: [0.001], modes: [fixed]}",
        ]
    )
    assert ok.returncode == 0 and "layers=[2]" not in ok.stderr, (ok.stdout + ok.stderr)[-2000:]
    assert "data/extract/all-MiniLM-L6-v2/layer2.npz" in ok.stdout and "layer1.npz" not in ok.stdout
    bad = _run_snakemake(["-n", "--cores", "1", *where, "--config", "modle_source=/tmp/x"])
    lines = [l for l in (bad.stdout + bad.stderr).splitlines() if l.startswith("attncert:")]
    assert bad.returncode != 0 and len(lines) == 1 and "did you mean 'model_source'" in lines[0], bad.stderr[-2000:]


def _x_fixes(node, out=None) -> set[str]:
    """Every check name stated under `x-fix` anywhere in the schema."""
    out = set() if out is None else out
    if isinstance(node, dict):
        out.update((node.get("x-fix") or {}).keys())
        for v in node.values():
            _x_fixes(v, out)
    elif isinstance(node, list):
        for v in node:
            _x_fixes(v, out)
    return out


def test_the_fixes_of_cross_key_checks_come_from_the_schema(monkeypatch):
    """Every check the schema cannot express takes its fix from the schema's `x-fix`, and every `x-fix` is used;
    an edit of the schema's text is what the error says."""
    import re

    import attncert.configuration.config as config_module

    schema = yaml.safe_load((REPO / "workflow" / "config" / "schema.yaml").read_text())
    source = (REPO / "src" / "attncert" / "configuration" / "config.py").read_text()
    used = set(re.findall(r'_check_error\([^;]*?"(\w+)"(?:,\s*\w+=[^)]*)?\)', source, re.S))
    assert used and used == _x_fixes(schema), used ^ _x_fixes(schema)
    assert "fix:" not in source.split("def validate_config")[1], "a fix written in the code, not the schema"
    schema["properties"]["n_prompts"]["x-fix"]["enough_prompts"] = "write more prompts"
    monkeypatch.setattr(config_module, "load_schema", lambda *path: schema)
    with pytest.raises(ConfigError, match=r"^config key 'n_prompts': 5 prompts .* has 0; fix: write more prompts$"):
        validate_config(_bad(lambda c: c.update(prompts="tests/data/empty_prompts.txt")), base_dir=REPO)
