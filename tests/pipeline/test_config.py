"""Config validation: each malformed config fails at parse time with one line naming key and fix."""
import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attncert.pipeline.model_source import ModelSourceError, check_reachable
from attncert.pipeline.config import ConfigError, validate_config

from conftest import REPO

DEFAULT = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
PAPER = yaml.safe_load((REPO / "workflow" / "config" / "paper.yaml").read_text())
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


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
    "query position beyond prompt": (lambda c: c["certify"].update(query_positions=[99]), "certify.query_positions", "max_tokens"),
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
