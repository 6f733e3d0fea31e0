"""The weights are the model's (`attncert.audit.model_weights`): a tiny BERT and a tiny GPT-2 written by
`save_pretrained`, extracted as the pipeline's extract and long_context_extract jobs extract them, audit clean;
each forgery (the file changed and its sidecar re-signed, as a deliberate forger would: a sidecar is a checksum,
anyone can recompute it) fails on the record that compares what was forged. Every tampered file still passes its
sidecar check (`verify_intermediate`), so the detection is this module's."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from attncert.audit.model_weights import audit_model_weights, prompts_of
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.model.extraction import extract_layers, extract_lengths, load_model, tokenize_prompts
from attncert.provenance.checkpoint_files import checkpoint_provenance
from attncert.provenance.provenance import provenance, write_sidecar

from conftest import REPO

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LAYERS = [0, 1, 2]
LONG_CONTEXT = {"passage": "passage.txt", "layer": 1, "lengths": [8, 24]}
CONFIG = {"prompts": "prompts.txt", "n_prompts": 3, "max_tokens": 8}


def _write(path: Path, arrays: dict, record: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    write_sidecar(path, record)


def build_run(run: Path, model_dir: Path, family: str) -> dict:
    """RUN/{prompts.txt, passage.txt, data/extract/M/layer{L}.npz, data/long_context/M/layer_tokens.npz} with
    sidecars as workflow/scripts/extract_layers.py and long_context_extract.py write them; the model section."""
    shutil.copy(REPO / "data" / "prompts.txt", run / "prompts.txt")
    shutil.copy(REPO / "data" / "long_context_passage.txt", run / "passage.txt")
    model_cfg = {"name": f"tiny-{family}", "family": family, "source": str(model_dir)}
    params = {"model": model_cfg, **CONFIG}
    loaded = load_model(model_cfg)
    prompts = prompts_of(CONFIG, run)
    ids = tokenize_prompts(loaded.tokenizer, prompts, CONFIG["max_tokens"])
    for L, arrays in extract_layers(loaded.model, loaded.family, ids, LAYERS).items():
        _write(run / "data" / "extract" / model_cfg["name"] / f"layer{L}.npz", arrays,
               provenance(params, stage="extract", layer=L, **checkpoint_provenance(model_cfg, loaded.revision)))
    lc = extract_lengths(loaded, (run / "passage.txt").read_text(), LONG_CONTEXT["lengths"], LONG_CONTEXT["layer"])
    _write(run / "data" / "long_context" / model_cfg["name"] / "layer_tokens.npz", lc,
           provenance(params, stage="long_context_extract", **checkpoint_provenance(model_cfg, loaded.revision)))
    return model_cfg


@pytest.fixture(scope="module", params=["bert", "gpt2"])
def clean_run(request, tmp_path_factory):
    family = request.param
    model_dir = request.getfixturevalue(f"tiny_{family}_dir")
    run = tmp_path_factory.mktemp(f"weights_{family}")
    return run, build_run(run, model_dir, family)


@pytest.fixture
def run(clean_run, tmp_path):
    """A copy of the clean run's files to tamper with (the checkpoint stays where it is)."""
    src, model_cfg = clean_run
    shutil.copytree(src, tmp_path / "run")
    return tmp_path / "run", dict(model_cfg)


def audit(run: Path, model_cfg: dict) -> list[dict]:
    return audit_model_weights(run / "data", model_cfg["name"], model_cfg, LAYERS, LONG_CONTEXT,
                               prompts_of(CONFIG, run), base_dir=run)


def failures(records) -> set[tuple]:
    return {(r["layer"], r["number"], r["length"]) for r in records if r["status"] == "fail"}


def forge(path: Path, edit) -> None:
    """Edit the arrays of an npz and re-sign its sidecar, keeping every other field (the forger's move)."""
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files}
    edit(arrays)
    record = json.loads(Path(str(path) + ".json").read_text())
    _write(path, arrays, {k: v for k, v in record.items() if k not in ("sha256", "size_bytes")})
    verify_intermediate(path)  # the forgery passes the sidecar check


def layer_file(run, model_cfg, L) -> Path:
    return run / "data" / "extract" / model_cfg["name"] / f"layer{L}.npz"


def tokens_file(run, model_cfg) -> Path:
    return run / "data" / "long_context" / model_cfg["name"] / "layer_tokens.npz"


def test_clean_run_passes_every_record(clean_run):
    run, model_cfg = clean_run
    records = audit(run, model_cfg)
    assert {r["status"] for r in records} == {"pass"}, [r["reason"] for r in records if r["status"] != "pass"]
    assert {r["table"] for r in records} == {"weights"} and {r["check"] for r in records} == {"weights"}
    per_layer = {"checkpoint_files", "attention_weights", "layernorm", "block_weights", "layout", "token_ids", "Z",
                 "residual", "head_output"}
    for L in LAYERS:
        assert {r["number"] for r in records if r["layer"] == L and r["length"] == ""} >= per_layer
    for T in LONG_CONTEXT["lengths"]:
        assert {r["number"] for r in records if r["length"] == T} == {"token_ids", "Z"}
    worst = max(float(r["margins"].split()[1].rstrip(";")) for r in records if r["number"] == "Z")
    assert worst < 1e-12  # the numpy forward pass agrees with torch's to float64 reordering noise


def test_halved_layernorm_of_a_layer_file_fails(run):
    run, model_cfg = run
    L = 2

    def halve(a):
        a["ln_gain"] = a["ln_gain"] / 2
        a["ln_bias"] = a["ln_bias"] / 2

    forge(layer_file(run, model_cfg, L), halve)
    assert failures(audit(run, model_cfg)) == {(L, "layernorm", "")}


def test_halved_layernorm_with_z_recomputed_fails(run):
    """The careful forger recomputes Z (GPT-2: ln_1 of the residual) with the halved LayerNorm: the weights
    comparison catches the gain and bias, the forward pass the new Z."""
    run, model_cfg = run
    L = 1

    bert = model_cfg["family"] == "bert"

    def halve(a):
        a["ln_gain"], a["ln_bias"] = a["ln_gain"] / 2, a["ln_bias"] / 2
        a["Z"] = a["Z"] / 2  # LN(x) g / 2 + b / 2
        if bert:  # BERT's heads read the residual stream itself
            a["residual"] = a["residual"] / 2

    forge(layer_file(run, model_cfg, L), halve)
    assert failures(audit(run, model_cfg)) == {(L, "layernorm", ""), (L, "Z", "")} | (
        {(L, "residual", "")} if bert else set())


def test_shifted_value_bias_of_the_long_context_tokens_fails(run):
    run, model_cfg = run

    def shift(a):
        a["b_V"] = a["b_V"].copy()
        a["b_V"][1, 0] += 1e-3

    forge(tokens_file(run, model_cfg), shift)
    assert failures(audit(run, model_cfg)) == {(LONG_CONTEXT["layer"], "attention_weights", "")}


def test_one_z_entry_moved_by_1e_6_fails(run):
    run, model_cfg = run
    L = 1

    def nudge(a):
        a["Z"] = a["Z"].copy()
        a["Z"][0, 3, 0] += 1e-6

    forge(layer_file(run, model_cfg, L), nudge)
    assert failures(audit(run, model_cfg)) == {(L, "Z", "")}


def test_one_long_context_z_entry_moved_by_1e_6_fails(run):
    run, model_cfg = run
    T = LONG_CONTEXT["lengths"][-1]

    def nudge(a):
        a[f"Z_{T}"] = a[f"Z_{T}"].copy()
        a[f"Z_{T}"][0, T - 1, 2] -= 1e-6

    forge(tokens_file(run, model_cfg), nudge)
    assert failures(audit(run, model_cfg)) == {(LONG_CONTEXT["layer"], "Z", T)}


def test_token_ids_of_another_prompt_fail(run):
    """Swapped prompts, Z recomputed consistently by the forger (the arrays of prompt 0 and 1 swapped)."""
    run, model_cfg = run
    L = 0

    def swap(a):
        for k in ("token_ids", "Z", "residual", "head_output"):
            a[k] = a[k][[1, 0, 2]]

    forge(layer_file(run, model_cfg, L), swap)
    assert failures(audit(run, model_cfg)) == {(L, "token_ids", "")}


def test_edited_checkpoint_weights_fail_the_hash(run, tmp_path):
    """The checkpoint's model.safetensors replaced by one with an edited weight: every file's recorded hashes
    differ, and the arrays extracted from the original checkpoint no longer equal the edited one's."""
    run, model_cfg = run
    model_dir = tmp_path / "model"
    shutil.copytree(model_cfg["source"], model_dir)
    tensors = load_file(str(model_dir / "model.safetensors"))
    key = next(k for k in tensors if k.endswith(("layer.0.attention.self.value.bias", "h.0.attn.c_attn.bias")))
    tensors[key] = tensors[key] + np.float32(0.01)
    save_file(tensors, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    model_cfg["source"] = str(model_dir)
    records = audit(run, model_cfg)
    fails = failures(records)
    assert {(L, "checkpoint_files", "") for L in LAYERS} <= fails
    assert (0, "attention_weights", "") in fails
    assert all("model.safetensors" in r["reason"] for r in records
               if r["number"] == "checkpoint_files" and r["status"] == "fail")


def test_sidecar_without_checkpoint_hashes_fails(run):
    run, model_cfg = run
    side = Path(str(layer_file(run, model_cfg, 1)) + ".json")
    record = json.loads(side.read_text())
    del record["checkpoint_files"]
    side.write_text(json.dumps(record))
    verify_intermediate(layer_file(run, model_cfg, 1))
    records = audit(run, model_cfg)
    assert failures(records) == {(1, "checkpoint_files", "")}
    assert "records no checkpoint file hashes" in next(r["reason"] for r in records if r["status"] == "fail")


def test_synthetic_model_is_not_covered(tmp_path):
    records = audit_model_weights(tmp_path, "random", {"name": "random", "family": "gpt2", "source": "random-gpt2"},
                                  [0], None, None)
    assert [r["status"] for r in records] == ["not covered"]
    assert "torch" in records[0]["reason"]


def test_without_prompts_the_ids_are_not_covered(clean_run):
    run, model_cfg = clean_run
    records = audit_model_weights(run / "data", model_cfg["name"], model_cfg, [0], None, None)
    ids = [r for r in records if r["number"] == "token_ids"]
    assert [r["status"] for r in ids] == ["not covered"] and "not re-tokenized" in ids[0]["reason"]
    assert all(r["status"] == "pass" for r in records if r["number"] != "token_ids")


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_key_layout_of_a_task_model_checkpoint(family, request, tmp_path):
    """A checkpoint written by a task model's save_pretrained (GPT2LMHeadModel: `transformer.` prefix, tied head
    not stored; BertForMaskedLM: `bert.` prefix and its `cls.` head) is read under the base model's names."""
    from transformers import BertForMaskedLM, GPT2LMHeadModel

    base = request.getfixturevalue(f"tiny_{family}_dir")
    cls = GPT2LMHeadModel if family == "gpt2" else BertForMaskedLM
    cls.from_pretrained(str(base), local_files_only=True).save_pretrained(tmp_path / "task_model")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (base / name).is_file():
            shutil.copy(base / name, tmp_path / "task_model" / name)
    prefix = "transformer." if family == "gpt2" else "bert."
    assert all(k.startswith((prefix, "cls.")) for k in load_file(str(tmp_path / "task_model" / "model.safetensors")))
    (tmp_path / "run").mkdir()
    model_cfg = build_run(tmp_path / "run", tmp_path / "task_model", family)
    records = audit(tmp_path / "run", model_cfg)
    assert {r["status"] for r in records} == {"pass"}, [r["reason"] for r in records if r["status"] != "pass"]


def test_a_hub_id_resolves_to_its_cached_snapshot(tmp_path, monkeypatch):
    """A hub id is the snapshot `refs/main` names in the Hugging Face cache (or the commit asked for), as
    `from_pretrained` loads it offline; a hub id not in the cache is one line naming the fix."""
    from attncert.provenance.checkpoint_files import CheckpointNotFound, checkpoint_directory

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--org--tiny"
    for commit in ("a" * 40, "b" * 40):
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("b" * 40)
    assert checkpoint_directory({"source": "org/tiny"}) == repo / "snapshots" / ("b" * 40)
    assert checkpoint_directory({"source": "org/tiny"}, "a" * 40) == repo / "snapshots" / ("a" * 40)
    with pytest.raises(CheckpointNotFound, match="not in the Hugging Face cache.*fix:"):
        checkpoint_directory({"source": "gpt2"})
