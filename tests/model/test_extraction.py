"""Extraction: every head's output recomputed from the stored arrays matches the model's own."""
import numpy as np
import pytest
import torch
from transformers import AutoModel

from attncert.model.extraction import (extract_layers, load_model, output_projection, recompute_head_output,
                                 tokenize_prompts)
from attncert.model.model_source import ModelSourceError
from attncert.configuration.config import read_prompts

from conftest import REPO


def _model_attention_outputs(target, family, token_ids, n_layers):
    """Each layer's merged head outputs, captured by our own forward hooks on a fresh float32 model."""
    model = AutoModel.from_pretrained(str(target), local_files_only=True).eval()
    got = {L: [] for L in range(n_layers)}
    hooks = [output_projection(model, family, L).register_forward_pre_hook(
        lambda m, args, L=L: got[L].append(args[0][0].detach().double().numpy())) for L in range(n_layers)]
    with torch.no_grad():
        for row in token_ids:
            ids = torch.as_tensor(row[None])
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
    for h in hooks:
        h.remove()
    return got


def _check(model_cfg, max_tokens=12):
    loaded = load_model(model_cfg)
    prompts = read_prompts(REPO / "data" / "prompts.txt", 5)
    ids = tokenize_prompts(loaded.tokenizer, prompts, max_tokens)
    n_layers = loaded.model.config.num_hidden_layers
    H = loaded.model.config.num_attention_heads
    arrays = extract_layers(loaded.model, loaded.family, ids, list(range(n_layers)))
    reference = _model_attention_outputs(loaded.resolved, loaded.family, ids, n_layers)
    worst = 0.0
    for L in range(n_layers):
        a = arrays[L]
        dh = a["W_Q"].shape[2]
        assert a["Z"].shape == (5, max_tokens, a["W_Q"].shape[1])
        for p in range(5):
            ref = reference[L][p]
            for h in range(H):
                mine = recompute_head_output(a, h, p)
                theirs = ref[:, h * dh:(h + 1) * dh]
                worst = max(worst, np.abs(mine - theirs).max() / np.abs(theirs).max())
    assert worst < 1e-5, worst
    return arrays


def test_tiny_gpt2_heads_recomputed(tiny_gpt2_dir):
    arrays = _check({"name": "tiny-gpt2", "family": "gpt2", "source": str(tiny_gpt2_dir)})
    a = arrays[1]
    assert bool(a["causal"])
    # GPT-2 heads read ln_1(residual), not the residual itself
    mu = a["residual"].mean(-1, keepdims=True)
    var = a["residual"].var(-1, keepdims=True)
    ln = (a["residual"] - mu) / np.sqrt(var + a["ln_eps"]) * a["ln_gain"] + a["ln_bias"]
    np.testing.assert_allclose(ln, a["Z"], rtol=1e-10, atol=1e-10)


def test_tiny_bert_heads_recomputed(tiny_bert_dir):
    arrays = _check({"name": "tiny-bert", "family": "bert", "source": str(tiny_bert_dir)})
    assert not bool(arrays[0]["causal"])
    np.testing.assert_array_equal(arrays[2]["Z"], arrays[2]["residual"])


@pytest.mark.slow
def test_embedded_model_heads_recomputed():
    arrays = _check({"name": "all-MiniLM-L6-v2", "family": "bert", "source": "embedded"}, max_tokens=16)
    assert arrays[0]["W_Q"].shape == (12, 384, 32)


def test_family_mismatch_is_one_line(tiny_bert_dir):
    with pytest.raises(ModelSourceError, match="fix: set model.family: bert"):
        load_model({"name": "x", "family": "gpt2", "source": str(tiny_bert_dir)})


def test_short_prompt_names_the_fix(tiny_bert_dir):
    loaded = load_model({"name": "x", "family": "bert", "source": str(tiny_bert_dir)})
    with pytest.raises(ValueError, match="lengthen the prompt"):
        tokenize_prompts(loaded.tokenizer, ["too short"], 12)


def test_a_checkpoint_without_tokenizer_files_is_refused_before_loading(tmp_path, tiny_bert_dir):
    """model.save_pretrained alone: transformers would build a 5-entry tokenizer on the fly and read every prompt
    as [CLS] [UNK] ... [SEP]; extraction and the run's up-front check refuse it, naming the fix."""
    from attncert.model.model_source import check_reachable

    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((tiny_bert_dir / name).read_bytes())
    cfg = {"name": "x", "family": "bert", "source": str(tmp_path)}
    for check in (load_model, check_reachable):
        with pytest.raises(ModelSourceError, match=r"no tokenizer .*fix: save the model's tokenizer into it, "
                                                   r"tokenizer\.save_pretrained\("):
            check(cfg)
    loaded = load_model(cfg, tokenizer=str(tiny_bert_dir))  # a tokenizer named explicitly
    assert loaded.tokenizer_source == str(tiny_bert_dir) and len(loaded.tokenizer("Any text.")["input_ids"]) == 5


def test_texts_too_short_for_the_models_tokenizer_are_refused_up_front(tiny_bert_dir):
    from attncert.model.extraction import check_texts

    cfg = {"name": "x", "family": "bert", "source": str(tiny_bert_dir)}
    check_texts(cfg, ["a prompt of enough tokens here"], 6, "one two three four five six seven eight", 10)
    with pytest.raises(ValueError, match="prompt 0 has only 4 tokens but max_tokens is 6; fix: lengthen"):
        check_texts(cfg, ["too short"], 6)
    with pytest.raises(ValueError, match="passage has 10 tokens .* asks for 16; fix: use lengths up to 10"):
        check_texts(cfg, ["a prompt of enough tokens here"], 6, "one two three four five six seven eight", 16)
