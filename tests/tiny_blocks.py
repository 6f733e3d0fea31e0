"""One transition of a tiny random block (GPT-2 pre-LN or BERT post-LN) with its curvature: the shared set-up of
the block tests (tests/block/)."""
import numpy as np
import torch

from attncert.block.build import transition_from_model
from attncert.block.residual import curvature
from attncert.model.extraction import load_model


def tiny_block(family: str, tiny_gpt2_dir, tiny_bert_dir):
    """(loaded model, transition at layer 1 / position 3 of 6 random tokens, 3 unit specifications C, curvature)."""
    path = tiny_gpt2_dir if family == "gpt2" else tiny_bert_dir
    loaded = load_model({"name": f"tiny-{family}", "family": family, "source": str(path)})
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((6, 16)) * (1.0 if family == "bert" else 2.0)
    tr = transition_from_model(loaded.model, family, 1, x0, position=3)
    C = torch.as_tensor(rng.standard_normal((3, 16)), dtype=torch.float64)
    C = C / C.norm(dim=1, keepdim=True)
    return loaded, tr, C, curvature(tr, C)
