"""A tiny randomly initialised transformer saved as a `from_pretrained` folder: 3 layers, 2 heads, width
16, the embedded model's tokenizer. For trying the workflow or a cluster profile in a minute (the
tests' models and the SLURM benchmark's reduced DAG); its numbers mean nothing about any real model.

LayerNorm gains and biases are perturbed away from 1 / 0 (a fresh init leaves them there), so that
their effect is visible.

It lives in the package, not in tests/, because the SLURM benchmark (`bench/slurm_profile.py`) builds its reduced
DAG on it and benchmark scripts import shared code from packages only (tests/test_bench_interface.py)."""
from __future__ import annotations

from pathlib import Path

FAMILIES = ("gpt2", "bert")


def save_tiny_model(path: Path, family: str, seed: int = 0) -> Path:
    """Write the tiny model of `family` ("gpt2" or "bert") to the folder `path`; returns `path`."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, GPT2Config, GPT2Model

    from attncert.model.model_source import embedded_model_dir

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(embedded_model_dir()), local_files_only=True)
    if family == "gpt2":
        model = GPT2Model(GPT2Config(n_layer=3, n_head=2, n_embd=16, n_positions=64, vocab_size=tok.vocab_size,
                                     bos_token_id=0, eos_token_id=0))
    else:
        model = BertModel(BertConfig(num_hidden_layers=3, num_attention_heads=2, hidden_size=16,
                                     intermediate_size=32, max_position_embeddings=64, vocab_size=tok.vocab_size))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name.lower() or "layernorm" in name.lower():
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return Path(path)
