"""`model.source: random-gpt2`: the GPT-2 small architecture with seeded random weights, through the real
extraction path, labelled synthetic everywhere."""
import copy

import numpy as np
import pytest
import torch
import yaml

from attncert.configuration.config import ConfigError, validate_config
from attncert.model.extraction import (extract_layers, load_model, output_projection, recompute_head_output,
                                      tokenize_prompts)
from attncert.model.model_source import check_reachable, model_dimensions, model_label
from attncert.provenance.provenance import provenance
from attncert.model.random_gpt2 import build_random_gpt2
from attncert.configuration.config import read_prompts

from conftest import REPO

CFG = {"name": "random-gpt2", "family": "gpt2", "source": "random-gpt2", "seed": 0}


@pytest.mark.slow
def test_random_gpt2_extraction_matches_the_models_own_attention():
    """GPT-2 small dimensions, 2 prompts x 8 tokens: every head recomputed from the stored arrays matches
    the head outputs of a freshly built float32 copy of the same seeded model."""
    loaded = load_model(CFG)
    assert loaded.synthetic and "SYNTHETIC" in loaded.resolved and "tokenizer" in loaded.resolved
    ids = tokenize_prompts(loaded.tokenizer, read_prompts(REPO / "data" / "prompts.txt", 2), 8)
    assert ids.shape == (2, 8) and ids.max() < 50257 and 101 not in ids[:, 0]  # no [CLS]
    arrays = extract_layers(loaded.model, "gpt2", ids, list(range(12)))
    reference = build_random_gpt2(0)  # float32, a second build from the same seed
    got = {L: [] for L in range(12)}
    hooks = [output_projection(reference, "gpt2", L).register_forward_pre_hook(
        lambda m, args, L=L: got[L].append(args[0][0].detach().double().numpy())) for L in range(12)]
    with torch.no_grad():
        for row in ids:
            reference(input_ids=torch.as_tensor(row[None]))
    for hk in hooks:
        hk.remove()
    worst = 0.0
    for L in range(12):
        a = arrays[L]
        assert a["W_Q"].shape == (12, 768, 64) and bool(a["causal"])
        for p in range(2):
            for h in range(12):
                theirs = got[L][p][:, h * 64:(h + 1) * 64]
                worst = max(worst, np.abs(recompute_head_output(a, h, p) - theirs).max() / np.abs(theirs).max())
    assert worst < 1e-5, worst
    # LayerNorm gains and biases were perturbed, so they matter
    assert np.abs(arrays[3]["ln_gain"] - 1).max() > 0.05 and np.abs(arrays[3]["ln_bias"]).max() > 0.05


def test_seed_decides_the_weights():
    from transformers import GPT2Config

    small = dict(n_layer=1, n_head=2, n_embd=16, n_positions=16, vocab_size=64)
    a, b, c = (build_random_gpt2(s, GPT2Config(**small)) for s in (0, 0, 1))
    wa, wb, wc = (m.h[0].attn.c_attn.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    state = torch.random.get_rng_state()
    build_random_gpt2(5, GPT2Config(**small))
    assert torch.equal(state, torch.random.get_rng_state())  # the caller's RNG is untouched


def test_labelled_synthetic_in_config_label_and_provenance():
    check_reachable(CFG)
    assert model_dimensions(CFG) == (12, 12)
    assert model_label(CFG) == "random-gpt2 (synthetic, not GPT-2)"
    assert model_label({"name": "gpt2", "source": "gpt2"}) == "gpt2"
    rec = provenance({"model": CFG}, stage="x")
    assert rec["synthetic_model"] is True and "not GPT-2" in rec["model_label"]
    cfg = yaml.safe_load((REPO / "workflow" / "config" / "paper.yaml").read_text())
    cfg["model"] = dict(CFG)
    validate_config(copy.deepcopy(cfg), base_dir=REPO)
    for bad, key in (({"name": "gpt2"}, "model.name"), ({"family": "bert"}, "model.family")):
        c = copy.deepcopy(cfg)
        c["model"].update(bad)
        with pytest.raises(ConfigError, match=f"'{key}'.*fix:"):
            validate_config(c, base_dir=REPO)
