"""One identity per run: a local checkpoint runs under its own name and family, a run never writes under a name
that holds another model's outputs, and a job refuses an input written for another model with one line."""
import copy
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from attncert.configuration.config import ConfigError, validate_config
from attncert.model.extraction import load_layer
from attncert.integrity.intermediate_check import IntermediateError, expect_model_of
from attncert.provenance.provenance import provenance, write_sidecar
from attncert.provenance.run_identity import apply_model_source, check_no_other_model, checkpoint_name
from conftest import REPO, SNAKEMAKE
from intermediate_files import write_extracted  # tests/intermediate_files.py

DEFAULT = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
EMBEDDED = dict(DEFAULT["model"])


def _resolved(given, **shortcut):
    """The config after `--config [model_source=...] 'model={given}'`: Snakemake merges both into the default
    before the Snakefile resolves the model section."""
    cfg = copy.deepcopy(DEFAULT)
    cfg.update(shortcut)
    cfg["model"].update(given or {})
    apply_model_source(cfg, given, EMBEDDED)
    return cfg


def test_a_local_checkpoint_runs_under_its_own_name_and_family(tiny_gpt2_dir, tiny_bert_dir):
    for directory, family in ((tiny_gpt2_dir, "gpt2"), (tiny_bert_dir, "bert")):
        cfg = _resolved(None, model_source=str(directory))
        assert cfg["model"] == {
            "name": checkpoint_name(directory),
            "family": family,
            "source": str(directory.resolve()),
        }
        assert cfg["model"]["name"] != EMBEDDED["name"] and "model_source" not in cfg
        validate_config(cfg, base_dir=REPO)
    named = _resolved({"name": "mine"}, model_source=str(tiny_gpt2_dir))
    assert named["model"]["name"] == "mine" and named["model"]["family"] == "gpt2"
    assert _resolved(None)["model"] == EMBEDDED  # no shortcut: the default is untouched
    # `--configfile workflow/config/default.yaml --config model_source=DIR`: default.yaml's name is not a choice
    assert _resolved({"name": EMBEDDED["name"]}, model_source=str(tiny_gpt2_dir))["model"]["name"] == checkpoint_name(
        tiny_gpt2_dir
    )


def test_a_family_that_contradicts_the_checkpoint_is_one_config_line(tiny_gpt2_dir):
    cfg = _resolved({"family": "bert"}, model_source=str(tiny_gpt2_dir))
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, base_dir=REPO)
    msg = str(info.value)
    assert "\n" not in msg and "'model.family'" in msg and "fix: set model.family: gpt2" in msg


def test_checkpoint_names_are_valid_model_names():
    assert checkpoint_name("/tmp/My Model (v2)") == "My-Model-v2"
    assert checkpoint_name("/tmp/tiny-gpt2.ckpt") == "tiny-gpt2.ckpt"


def _extract_sidecar(root, model):
    """data/extract/NAME/layer0.npz written by a job whose params.model is `model`."""
    path = write_extracted(root, model=model["name"])
    write_sidecar(path, provenance({"model": model, "code": "abc"}, stage="extract", layer=0))
    return path


def test_a_name_that_holds_another_models_outputs_is_refused(tmp_path, tiny_bert_dir):
    _extract_sidecar(tmp_path, EMBEDDED)
    check_no_other_model(EMBEDDED, tmp_path)  # the same model: fine
    other = {"name": EMBEDDED["name"], "family": "bert", "source": str(tiny_bert_dir)}
    with pytest.raises(ConfigError) as info:
        check_no_other_model(other, tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and "data/extract/all-MiniLM-L6-v2/layer0.npz.json" in msg and "source embedded" in msg
    assert "fix: give this run its own name" in msg
    check_no_other_model(dict(other, name="tiny"), tmp_path)  # its own name: nothing of another model there


def test_an_input_whose_sidecar_names_another_model_is_refused_with_one_line(tmp_path):
    path = _extract_sidecar(tmp_path, EMBEDDED)
    expect_model_of({"model": EMBEDDED})
    try:
        assert set(load_layer(path))  # the job's own model: loads
        for other in ({**EMBEDDED, "source": "/tmp/my-checkpoint"}, {**EMBEDDED, "family": "gpt2"}):
            expect_model_of({"model": other})
            with pytest.raises(IntermediateError) as info:
                load_layer(path)
            msg = str(info.value)
            assert "\n" not in msg and "was written for all-MiniLM-L6-v2 (source embedded, family bert)" in msg
            assert msg.endswith("regenerate it with: snakemake --cores all data/extract/all-MiniLM-L6-v2/layer0.npz "
                                "--forcerun extract")
    finally:
        expect_model_of({})


def test_a_file_under_another_models_folder_is_refused(tmp_path):
    """MiniLM weights moved (or written) under data/extract/gpt2/: the sidecar names another model than the folder."""
    path = _extract_sidecar(tmp_path, EMBEDDED)
    moved = tmp_path / "data/extract/gpt2/layer0.npz"
    moved.parent.mkdir(parents=True)
    path.rename(moved)
    Path(str(path) + ".json").rename(str(moved) + ".json")
    with pytest.raises(IntermediateError, match=r"was written for model all-MiniLM-L6-v2, not gpt2"):
        load_layer(moved)


@pytest.mark.slow
def test_a_target_for_another_model_is_refused(tmp_path):
    """{model} only matches the configured model: under the default config no rule writes data/extract/gpt2/."""
    shutil.copytree(
        REPO / "data",
        tmp_path / "data",
        ignore=shutil.ignore_patterns("extract", "certify", "baselines", "block", "minip", "logs", "long_context"),
    )

    def dry_run(target):
        return subprocess.run(
            [
                SNAKEMAKE,
                target,
                "-n",
                "--cores",
                "1",
                "--snakefile",
                str(REPO / "Snakefile"),
                "--directory",
                str(tmp_path),
                "--configfile",
                str(REPO / "workflow" / "config" / "default.yaml"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
        )

    res = dry_run("data/extract/gpt2/layer0.npz")
    assert res.returncode != 0 and "MissingRuleException" in res.stdout + res.stderr, (res.stdout + res.stderr)[-2000:]
    ok = dry_run("data/extract/all-MiniLM-L6-v2/layer0.npz")
    assert ok.returncode == 0 and "extract" in ok.stdout, (ok.stdout + ok.stderr)[-2000:]
    assert not (tmp_path / "data" / "extract").exists()


def test_orphan_sidecars_are_removed_only_under_this_runs_model_and_grid(tmp_path):
    """A run cleans the debris of its own model and of its own Min-IP grid, never another model's or grid's."""
    from attncert.provenance.run_identity import remove_own_orphan_sidecars

    mine, theirs = (write_extracted(tmp_path, model=m) for m in ("mine", "theirs"))
    grids = []
    for grid in ("ours", "other"):
        measured = tmp_path / f"figures/tables/minip/{grid}/minip_measured.json"
        measured.parent.mkdir(parents=True)
        measured.write_text("{}")
        write_sidecar(measured, {"stage": "minip_measured"})
        grids.append(measured)
    for path in (mine, theirs, *grids):
        path.unlink()
    assert remove_own_orphan_sidecars("mine", "ours", tmp_path) == [Path(str(mine) + ".json"),
                                                                      Path(str(grids[0]) + ".json")]
    assert Path(str(theirs) + ".json").exists() and Path(str(grids[1]) + ".json").exists()
