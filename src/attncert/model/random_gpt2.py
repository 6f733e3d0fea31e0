"""`model.source: random-gpt2`: a GPT-2-shaped model with a seeded random init, for measuring cost.

SYNTHETIC: this is the GPT-2 small *architecture* (`transformers.GPT2Model(GPT2Config())`: 12 blocks x
12 heads, d = 768, d_h = 64, pre-LN, causal) with random weights, not GPT-2. It runs through the real
extraction path so that every later stage sees GPT-2's dimensions; no result computed on it is a
GPT-2 result, and every table, figure and sidecar labels it (`model_source.model_label`).

- Weights: transformers' own initialisation (normal(0, `model.init_std`), default GPT2Config's 0.02;
  scaled residual projections) under `torch.manual_seed(model.seed)` (default 0), inside
  `torch.random.fork_rng` so the caller's global RNG is untouched. At 0.02 the attention scores move
  far less under a perturbation than GPT-2's (score half-width ~0.14 fixed / ~0.3 varying query at
  r = 0.02 and position 4, against ~4-5 for GPT-2-sized heads with realistic weight scales); a larger
  `init_std` widens them (roughly like init_std^2), for checking how cost depends on it. Random init leaves every
  LayerNorm at gain 1 / bias 0; the gains and biases are
  then perturbed (gain 1 + 0.1 N(0, 1), bias 0.1 N(0, 1)) so that the normalized token a head reads
  depends on them, as it does for trained weights.
- Tokenizer: the GPT-2 tokenizer cannot be downloaded without hub access, so the embedded model's
  tokenizer (all-MiniLM-L6-v2, BERT WordPiece, vocabulary 30,522) is used without its special
  tokens ([CLS]/[SEP]), and its ids are mapped into GPT-2's vocabulary by `id mod 50,257` (the
  identity, since every WordPiece id is below 50,257). The prompts are therefore not tokenized as
  GPT-2 would tokenize them: another reason the numbers are not GPT-2's.
"""
from __future__ import annotations

from attncert.model.model_source import RANDOM_GPT2, embedded_model_dir

LN_PERTURBATION = 0.1


def tokenizer_note(vocab_size: int) -> str:
    return (f"embedded all-MiniLM-L6-v2 WordPiece tokenizer without special tokens, ids mapped into "
            f"GPT-2's vocabulary by id mod {vocab_size} (GPT-2's own tokenizer is not available offline)")


DEFAULT_INIT_STD = 0.02  # GPT2Config().initializer_range


def describe(seed: int, init_std: float = DEFAULT_INIT_STD) -> str:
    """The resolved-source string recorded in provenance."""
    return (f"{RANDOM_GPT2} (SYNTHETIC, not GPT-2): transformers.GPT2Model(GPT2Config(initializer_range={init_std:g})) "
            f"with a seeded random init (seed {seed}), LayerNorm gains/biases perturbed by {LN_PERTURBATION} N(0,1); "
            f"tokenizer: {tokenizer_note(50257)}")


class MappedTokenizer:
    """Wraps a tokenizer: no special tokens, ids mapped into a vocabulary of `vocab_size` (id mod size)."""

    def __init__(self, inner, vocab_size: int):
        self.inner, self.vocab_size = inner, int(vocab_size)
        self.note = tokenizer_note(self.vocab_size)

    def __call__(self, text, truncation: bool = False, max_length: int | None = None, **kwargs):
        ids = self.inner(text, add_special_tokens=False, truncation=truncation, max_length=max_length)["input_ids"]
        return {"input_ids": [int(i) % self.vocab_size for i in ids]}


def build_random_gpt2(seed: int = 0, config=None, init_std: float = DEFAULT_INIT_STD):
    """The seeded random GPT-2-shaped model (float32, eval mode, eager attention); `config` overrides
    GPT2Config(initializer_range=init_std) (tests use smaller ones)."""
    import torch
    from transformers import GPT2Config, GPT2Model

    cfg = config if config is not None else GPT2Config(initializer_range=float(init_std))
    cfg._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = GPT2Model(cfg)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.split(".")[-2].startswith("ln_"):
                    base = 1.0 if name.endswith("weight") else 0.0
                    p.copy_(base + LN_PERTURBATION * torch.randn_like(p))
    return model.eval()


def random_gpt2_tokenizer(vocab_size: int = 50257) -> MappedTokenizer:
    from transformers import AutoTokenizer

    inner = AutoTokenizer.from_pretrained(str(embedded_model_dir()), local_files_only=True)
    return MappedTokenizer(inner, vocab_size)
