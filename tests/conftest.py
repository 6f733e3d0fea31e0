"""Shared fixtures: tiny randomly initialised models saved as local `from_pretrained` folders."""
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parents[1]

# One hypothesis policy for every property test: no per-example deadline (examples solve convex programs
# or train small models, and the 2 cores are shared, so wall time per example is not a property of the
# code). Tests set their own example counts; none sets a deadline (tests/test_hypothesis_policy.py).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("attncert", deadline=None)
_hypothesis_settings.load_profile("attncert")


def _save_tiny(path: Path, family: str) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel, GPT2Config, GPT2Model

    from attncert.pipeline.model_source import embedded_model_dir

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(str(embedded_model_dir()), local_files_only=True)
    if family == "gpt2":
        cfg = GPT2Config(n_layer=3, n_head=2, n_embd=16, n_positions=64, vocab_size=tok.vocab_size,
                         bos_token_id=0, eos_token_id=0)
        model = GPT2Model(cfg)
    else:
        cfg = BertConfig(num_hidden_layers=3, num_attention_heads=2, hidden_size=16, intermediate_size=32,
                         max_position_embeddings=64, vocab_size=tok.vocab_size)
        model = BertModel(cfg)
    # random init leaves LayerNorm at gain 1 / bias 0: perturb them so the test sees their effect
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name.lower() or "layernorm" in name.lower():
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    return _save_tiny(tmp_path_factory.mktemp("tiny_gpt2"), "gpt2")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return _save_tiny(tmp_path_factory.mktemp("tiny_bert"), "bert")


try:  # threaded OpenBLAS makes small numpy/scipy calls (e.g. L-BFGS-B) ~20x slower on a busy 2-core machine
    from threadpoolctl import threadpool_limits
except ImportError:  # same results, only slower
    import contextlib

    def threadpool_limits(limits=None):
        return contextlib.nullcontext()


@pytest.fixture(autouse=True, scope="session")
def _single_threaded_blas():
    with threadpool_limits(1):
        yield




@pytest.fixture(scope="module")
def one_torch_thread():
    """2 shared cores: tiny torch batches (ascent, bound propagation) run faster and steadier on one
    intra-op thread; modules opt in with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
