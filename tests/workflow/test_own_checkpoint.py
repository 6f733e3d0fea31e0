"""A researcher's own checkpoint, one command (`snakemake --cores all --config model_source=DIR`, no other override):
a folder saved without its tokenizer stops before any job with one line; a small causal checkpoint gets the
long-context grid fitted to it (one log line) and its long-context units attend to T keys at length T
(workflow/config/README.md, "What a small checkpoint needs")."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from attncert.provenance.run_identity import checkpoint_name
from conftest import REPO, SNAKEMAKE


def _own_checkpoint(wd: Path, model_dir: Path, *args):
    """`snakemake --cores 2 [args] --config model_source=DIR` in a working folder holding the committed inputs and
    the workflow's default configuration (where the Snakefile's `configfile:` finds it)."""
    (wd / "data").mkdir(exist_ok=True)
    (wd / "workflow" / "config").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "workflow" / "config" / "default.yaml", wd / "workflow" / "config" / "default.yaml")
    for f in ("prompts.txt", "paper_claims.yaml", "long_context_passage.txt"):
        shutil.copy(REPO / "data" / f, wd / "data" / f)
    cmd = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(wd), "--cores", "2", *args,
           "--config", f"model_source={model_dir}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO / "src"))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)


def test_a_checkpoint_saved_without_its_tokenizer_stops_before_any_job(tmp_path, tiny_gpt2_dir):
    model = tmp_path / "mine"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):  # model.save_pretrained alone
        shutil.copy(tiny_gpt2_dir / name, model / name)
    (tmp_path / "run").mkdir()
    res = _own_checkpoint(tmp_path / "run", model, "-n")
    lines = [line for line in res.stderr.splitlines() if line.startswith("attncert:")]
    assert res.returncode != 0 and "Traceback" not in res.stderr and len(lines) == 1, res.stderr[-3000:]
    assert "no tokenizer" in lines[0] and "fix: save the model's tokenizer into it, tokenizer.save_pretrained(" \
        in lines[0]


def test_the_default_grid_is_fitted_to_a_small_causal_checkpoint(tmp_path, tiny_gpt2_dir):
    res = _own_checkpoint(tmp_path, tiny_gpt2_dir, "-n")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "attncert: long_context fitted to the model (3 layers, 2 heads, 64 positions, causal): heads [0, 3, 6, " \
        "9] -> [0]; lengths [16, 64, 128, 256, 512] -> [16, 64]; query_position 4 -> last" in res.stderr
    stats = out.split("Job stats:")[-1]
    jobs = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M)}
    assert jobs["long_context_certify"] == 2 and jobs["long_context_merge"] == 1, jobs  # 16 + 64 > 64 keys: two jobs
    assert jobs["block_transition"] == 2 and jobs["extract"] == 3, jobs


@pytest.mark.slow
def test_long_context_on_a_small_causal_checkpoint_attends_to_every_key(tmp_path, tiny_gpt2_dir):
    """One command, the long-context table as target: no traceback, and each unit at length T reads T keys."""
    name = checkpoint_name(tiny_gpt2_dir)
    res = _own_checkpoint(tmp_path, tiny_gpt2_dir, f"figures/tables/{name}/long_context.md")
    assert res.returncode == 0, res.stderr[-4000:]
    units = pd.read_csv(tmp_path / f"data/long_context/{name}/units.csv")
    assert set(units["length"]) == {16, 64} and set(units["head"]) == {0} and (units["status"] == "ok").all()
    assert (units["query_pos"] == units["length"] - 1).all() and (units["n_tokens"] == units["length"]).all()
