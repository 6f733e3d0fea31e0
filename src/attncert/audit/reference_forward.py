"""The model run in numpy, float64, from the checkpoint's tensors: what each layer's heads read, re-derived.

Independent of the extraction (which runs transformers' torch modules and captures their tensors with hooks):
this is the published architecture written out once more. For token ids t_1..t_T (one sequence, no padding):

BERT (post-LN, bidirectional; transformers' `BertModel` with the attention mask of all ones):

    x_0 = LN_emb(E_word[t] + E_pos[0..T-1] + E_type[0])
    per layer l:  a = MHA_l(x_l) W_O + b_O,  y = LN_attn(x_l + a),  x_{l+1} = LN_out(y + act(y W_1 + b_1) W_2 + b_2)
    residual entering layer L = x_L; the heads of layer L read Z = x_L

GPT-2 (pre-LN, causal; `GPT2Model`):

    x_0 = E_tok[t] + E_pos[0..T-1]
    per block l:  z = ln_1(x_l),  x' = x_l + MHA_l(z) W_O + b_O,  x_{l+1} = x' + act(ln_2(x') W_1 + b_1) W_2 + b_2
    residual entering block L = x_L; the heads of block L read Z = ln_1(x_L)

with MHA's head h: `softmax((z W_Q[h] + b_Q[h]) (z W_K[h] + b_K[h])^T / sqrt(d_h) [+ causal mask]) (z W_V[h] +
b_V[h])`, LN(x) = (x - mean) / sqrt(var + eps) * gain + bias (biased variance), and the activation named by
`config.json`: `gelu` is the exact erf form x (1 + erf(x / sqrt 2)) / 2 (scipy.special.erf), `gelu_new` and
`gelu_pytorch_tanh` the tanh approximation x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2, `relu` max(x, 0).
Dropout is the identity (the extraction runs the model in eval mode).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import erf

from attncert.audit.checkpoint_tensors import CheckpointUnreadable, ModelConfig, Weights, layer_arrays


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {
    "gelu": lambda x: 0.5 * x * (1.0 + erf(x / np.sqrt(2.0))),
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "relu": lambda x: np.maximum(x, 0.0),
}


def layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gain + bias


def attention_heads(z: np.ndarray, a: dict, causal: bool) -> np.ndarray:
    """Each head's attention output (H, T, d_h) for one sequence z (T, d)."""
    H, T = a["W_Q"].shape[0], z.shape[0]

    def per_head(W, b):  # z W[h] + b[h] for every head, as one product: (H, T, d_h), contiguous
        y = z @ np.concatenate(list(W), axis=1) + np.concatenate(list(b))
        return np.ascontiguousarray(y.reshape(T, H, -1).transpose(1, 0, 2))

    q, k, v = (per_head(a[f"W_{m}"], a[f"b_{m}"]) for m in "QKV")
    s = q @ np.ascontiguousarray(k.transpose(0, 2, 1)) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@dataclass
class LayerTrace:
    """What the extraction stores of one layer, for one sequence: Z (T, d), residual (T, d), head_output (H, T, d_h)."""

    Z: np.ndarray
    residual: np.ndarray
    head_output: np.ndarray


def forward(w: Weights, cfg: ModelConfig, token_ids: np.ndarray, layers: list[int]) -> dict[int, LayerTrace]:
    """Run one sequence (T,) through the blocks up to max(layers) and return each requested layer's trace."""
    if cfg.activation not in ACTIVATIONS:
        raise CheckpointUnreadable(f"activation {cfg.activation!r} has no numpy form here "
                                   f"(known: {', '.join(ACTIVATIONS)})")
    act = ACTIVATIONS[cfg.activation]
    ids = np.asarray(token_ids, dtype=np.int64)
    T = ids.shape[0]
    gpt2 = cfg.family == "gpt2"
    if gpt2:
        x = w("wte.weight")[ids] + w("wpe.weight")[:T]
    else:
        x = w("embeddings.word_embeddings.weight")[ids] + w("embeddings.token_type_embeddings.weight")[0]
        x = layer_norm(x + w("embeddings.position_embeddings.weight")[:T], w("embeddings.LayerNorm.weight"),
                       w("embeddings.LayerNorm.bias"), cfg.eps)
    out = {}
    for layer in range(max(layers) + 1):
        a = layer_arrays(w, cfg, layer)
        z = layer_norm(x, a["ln_gain"], a["ln_bias"], cfg.eps) if gpt2 else x
        heads = attention_heads(z, a, causal=gpt2)
        if layer in layers:
            out[layer] = LayerTrace(z, x, heads)
        attn = np.concatenate(list(heads), axis=-1) @ np.concatenate(list(a["W_O"]), axis=0) + a["b_O"]
        if gpt2:
            x = x + attn
            m = layer_norm(x, a["ln_attn_gain"], a["ln_attn_bias"], cfg.eps)
            x = x + act(m @ a["mlp_W_1"] + a["mlp_b_1"]) @ a["mlp_W_2"] + a["mlp_b_2"]
        else:
            y = layer_norm(x + attn, a["ln_attn_gain"], a["ln_attn_bias"], cfg.eps)
            nxt = f"encoder.layer.{layer}.output.LayerNorm."
            x = layer_norm(y + act(y @ a["mlp_W_1"] + a["mlp_b_1"]) @ a["mlp_W_2"] + a["mlp_b_2"],
                           w(nxt + "weight"), w(nxt + "bias"), cfg.eps)
    return out
