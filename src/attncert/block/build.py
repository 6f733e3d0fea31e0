"""Building a block transition l -> l+1 (`map.BlockTransition`): from a transformers model, or from the
extraction files alone (what the pipeline does); its units' specification rows are
`head.specification.specification_rows`.
"""
from __future__ import annotations

import numpy as np
import torch

from attncert.block.map import ACTIVATIONS, DTYPE, BlockTransition, LayerNormParams


def _t(a) -> torch.Tensor:
    return torch.as_tensor(a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a),
                           dtype=DTYPE).clone()


def _ln(module) -> LayerNormParams:
    return LayerNormParams(_t(module.weight), _t(module.bias), float(module.eps))


def _blocks(model, family):
    return model.h if family == "gpt2" else model.encoder.layer


def transition_from_model(model, family: str, layer: int, x0: np.ndarray, position: int) -> BlockTransition:
    """Weights of block `layer` (and the LayerNorm the heads of block layer+1 read) from a
    transformers GPT2Model / BertModel; x0 (T, d) is the residual stream entering block `layer`."""
    if family not in ("gpt2", "bert"):
        raise ValueError(f"family must be 'gpt2' or 'bert'; got {family!r}")
    cfg = model.config
    blocks = _blocks(model, family)
    if layer + 1 >= len(blocks):
        raise ValueError(f"transition {layer} -> {layer + 1} needs block {layer + 1}; the model has {len(blocks)}")
    x0 = torch.as_tensor(np.asarray(x0), dtype=DTYPE)
    T, d = x0.shape
    if family == "gpt2":
        if not getattr(cfg, "scale_attn_weights", True) or getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
            raise ValueError("only GPT-2 attention scaled by 1/sqrt(d_h) is supported")
        act = ACTIVATIONS.get(cfg.activation_function)
        blk = blocks[layer]
        W = _t(blk.attn.c_attn.weight)
        b = _t(blk.attn.c_attn.bias)
        kw = dict(W_Q=W[:, :d], W_K=W[:, d:2 * d], W_V=W[:, 2 * d:], b_Q=b[:d], b_K=b[d:2 * d], b_V=b[2 * d:],
                  W_O=_t(blk.attn.c_proj.weight), b_O=_t(blk.attn.c_proj.bias),
                  W_1=_t(blk.mlp.c_fc.weight), b_1=_t(blk.mlp.c_fc.bias),
                  W_2=_t(blk.mlp.c_proj.weight), b_2=_t(blk.mlp.c_proj.bias),
                  ln_in=_ln(blk.ln_1), ln_attn=_ln(blk.ln_2), ln_out=_ln(blocks[layer + 1].ln_1))
        keys = list(range(position + 1))
        name = cfg.activation_function
    else:
        act = ACTIVATIONS.get(cfg.hidden_act if isinstance(cfg.hidden_act, str) else "")
        blk = blocks[layer]
        sa = blk.attention.self
        if getattr(sa, "position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")
        kw = dict(W_Q=_t(sa.query.weight).T, W_K=_t(sa.key.weight).T, W_V=_t(sa.value.weight).T,
                  b_Q=_t(sa.query.bias), b_K=_t(sa.key.bias), b_V=_t(sa.value.bias),
                  W_O=_t(blk.attention.output.dense.weight).T, b_O=_t(blk.attention.output.dense.bias),
                  W_1=_t(blk.intermediate.dense.weight).T, b_1=_t(blk.intermediate.dense.bias),
                  W_2=_t(blk.output.dense.weight).T, b_2=_t(blk.output.dense.bias),
                  ln_attn=_ln(blk.attention.output.LayerNorm), ln_out=_ln(blk.output.LayerNorm))
        keys = list(range(T))
        name = cfg.hidden_act
    if act is None:
        raise ValueError(f"activation {name!r} is not supported (gelu, gelu_new, gelu_pytorch_tanh)")
    if not 0 <= position < T:
        raise ValueError(f"position {position} out of range for {T} tokens")
    return BlockTransition(family=family, layer=layer, position=position, x0=x0, keys=keys,
                           n_heads=cfg.num_attention_heads, activation=act,
                           **{k: v.contiguous() for k, v in kw.items() if isinstance(v, torch.Tensor)},
                           **{k: v for k, v in kw.items() if not isinstance(v, torch.Tensor)})


def transition_from_arrays(layer_arrays: dict, next_arrays: dict, layer: int, prompt: int,
                           position: int) -> BlockTransition:
    """The same transition as `transition_from_model`, from the extraction files of layers L and L + 1.

    Layer L's file holds the attention weights per head, the block's MLP and post-attention LayerNorm,
    the reading LayerNorm of layer L (GPT-2's ln_1) and the residual stream; layer L + 1's reading
    LayerNorm is the one the next heads read (GPT-2 ln_1 of block L + 1, BERT output.LayerNorm of L).
    """
    a, nx = layer_arrays, next_arrays
    family = "gpt2" if bool(a["causal"]) else "bert"
    act_name = str(a["activation"])
    act = ACTIVATIONS.get(act_name)
    if act is None:
        raise ValueError(f"activation {act_name!r} is not supported (gelu, gelu_new, gelu_pytorch_tanh)")
    x0 = _t(a["residual"][prompt])
    T = x0.shape[0]
    if not 0 <= position < T:
        raise ValueError(f"position {position} out of range for {T} tokens")

    def heads_to_cols(W):  # (H, d, d_h) -> (d, H d_h), head-major columns
        return _t(np.concatenate(list(W), axis=1))

    def ln(prefix, arr):
        return LayerNormParams(_t(arr[f"{prefix}_gain"]), _t(arr[f"{prefix}_bias"]), float(arr[f"{prefix}_eps"]))

    kw = dict(W_Q=heads_to_cols(a["W_Q"]), W_K=heads_to_cols(a["W_K"]), W_V=heads_to_cols(a["W_V"]),
              b_Q=_t(a["b_Q"].reshape(-1)), b_K=_t(a["b_K"].reshape(-1)), b_V=_t(a["b_V"].reshape(-1)),
              W_O=_t(np.concatenate(list(a["W_O"]), axis=0)), b_O=_t(a["b_O"]),
              W_1=_t(a["mlp_W_1"]), b_1=_t(a["mlp_b_1"]), W_2=_t(a["mlp_W_2"]), b_2=_t(a["mlp_b_2"]),
              ln_attn=ln("ln_attn", a), ln_out=ln("ln", nx))
    if family == "gpt2":
        kw["ln_in"] = ln("ln", a)
    keys = list(range(position + 1)) if family == "gpt2" else list(range(T))
    return BlockTransition(family=family, layer=layer, position=position, x0=x0, keys=keys,
                           n_heads=int(a["W_Q"].shape[0]), activation=act,
                           **{k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in kw.items()})


@torch.no_grad()
def reference_output(model, family: str, layer: int, x: np.ndarray, position: int) -> np.ndarray:
    """The same quantity computed by the transformers modules themselves (for validation):
    the normalized token at `position` that block layer+1's heads read when block `layer` receives x.

    GPT-2: the block is run on positions 0..position only (causal: row `position` attends to all of
    them, so no mask is needed); BERT: on all positions without a mask (bidirectional)."""
    blocks = _blocks(model, family)
    X = torch.as_tensor(np.asarray(x), dtype=DTYPE).unsqueeze(0)
    if family == "gpt2":
        X = X[:, :position + 1]
    res = blocks[layer](X)
    out = res[0] if isinstance(res, tuple) else res
    if family == "gpt2":
        out = blocks[layer + 1].ln_1(out)
    return out[0, position].numpy()
