"""Weight and activation extraction: what each attention head reads and how it maps it.

"The normalized token a head reads" (z_j in Paper A) is the exact input of W_Q, W_K, W_V:

- GPT-2 (pre-LN, causal):   z = ln_1(x) of the block, with x the residual stream entering the block
  (hidden_states[L]); ln_1's gain and bias are applied. Head h attends to positions j <= i.
- BERT (post-LN, bidirectional): z = x itself, the residual stream entering layer L, which is already
  the output of a LayerNorm: the embeddings' LayerNorm for L = 0 and layer L-1's `output.LayerNorm`
  for L > 0 (gain and bias applied). Head h attends to all positions.

Per layer L we store (orientation: row vectors, `q = z @ W_Q[h] + b_Q[h]`):

    W_Q, W_K, W_V   (H, d, d_h)     b_Q, b_K, b_V  (H, d_h)
    W_O             (H, d_h, d)     the rows of the output projection belonging to head h
    b_O             (d,)
    Z               (P, T, d)       normalized tokens the layer's heads read, per prompt
    residual        (P, T, d)       residual stream entering the block (BERT: equals Z)
    ln_gain, ln_bias (d,), ln_eps   the LayerNorm that produced Z
    head_output     (P, H, T, d_h)  each head's attention output, captured from the model by a hook
    token_ids       (P, T)
    causal          bool
    mlp_W_1 (d, m), mlp_b_1 (m,), mlp_W_2 (m, d), mlp_b_2 (d,)   the block's MLP
    ln_attn_gain, ln_attn_bias (d,), ln_attn_eps   the LayerNorm after the attention sublayer (GPT-2
                    ln_2, BERT attention.output.LayerNorm)
    activation      the MLP activation's name (transformers' `activation_function` / `hidden_act`)

With the reading LayerNorm of layer L + 1 these are every weight of the block map L -> L + 1
(`attncert.block.map.transition_from_arrays`): no later stage loads the model again.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attncert.integrity.intermediate_check import verify_intermediate
from attncert.model.model_source import (ModelSourceError, check_tokenizer, is_synthetic, resolve,
                                         unreachable_message)


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    family: str
    resolved: str
    revision: str | None
    synthetic: bool = False
    tokenizer_source: str = ""  # where the tokenizer was read from (the checkpoint's folder or id unless given)


def _load_random_gpt2(model_cfg: dict) -> LoadedModel:
    """SYNTHETIC GPT-2-shaped model (attncert.model.random_gpt2): random weights, not GPT-2."""
    from attncert.model.random_gpt2 import build_random_gpt2, describe, random_gpt2_tokenizer

    if model_cfg["family"] != "gpt2":
        raise ModelSourceError(
            f"model.source 'random-gpt2' is a GPT-2-shaped model but model.family is {model_cfg['family']!r}; fix: set "
            f"model.family: gpt2"
        )
    seed, init_std = int(model_cfg.get("seed", 0)), float(model_cfg.get("init_std", 0.02))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = build_random_gpt2(seed, init_std=init_std)
    tokenizer = random_gpt2_tokenizer(model.config.vocab_size)
    model.to(torch.float64)
    return LoadedModel(model, tokenizer, "gpt2", describe(seed, init_std), None, synthetic=True,
                       tokenizer_source="the embedded model's")


def load_tokenizer(source: str):
    """The tokenizer of a `save_pretrained` folder or a hub id (ModelSourceError, one line, when it cannot be read)."""
    from transformers import AutoTokenizer

    path = Path(source).expanduser()
    try:
        return AutoTokenizer.from_pretrained(str(path) if path.exists() else source, local_files_only=path.exists())
    except Exception as e:  # noqa: BLE001
        raise ModelSourceError(f"tokenizer {source!r} cannot be loaded ({type(e).__name__}); fix: pass a folder "
                               "written by tokenizer.save_pretrained, or a hub id in the local cache") from None


def load_model(model_cfg: dict, tokenizer: str | None = None) -> LoadedModel:
    """Load the configured model with transformers (`from_pretrained` on a hub id or a directory), or
    build the synthetic `random-gpt2`. The tokenizer is the checkpoint's own (a local folder without one is
    refused: `model_source.check_tokenizer`) unless `tokenizer` names another folder or hub id."""
    from transformers import AutoModel, AutoTokenizer

    if is_synthetic(model_cfg):
        return _load_random_gpt2(model_cfg)
    if tokenizer is None:
        check_tokenizer(model_cfg)
    target = resolve(model_cfg)
    local = Path(target).exists()
    if local:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        model = AutoModel.from_pretrained(target, attn_implementation="eager", local_files_only=local)
        tok = AutoTokenizer.from_pretrained(target, local_files_only=local) if tokenizer is None else None
    except Exception as e:  # noqa: BLE001
        raise ModelSourceError(unreachable_message(model_cfg["source"], type(e).__name__)) from None
    tok = tok if tokenizer is None else load_tokenizer(tokenizer)
    family = model_cfg["family"]
    if model.config.model_type != family:
        raise ModelSourceError(
            f"model.family is {family!r} but {target!r} is a {model.config.model_type!r} model; fix: set model.family: "
            f"{model.config.model_type}"
        )
    model.eval()
    model.to(torch.float64)
    revision = getattr(model.config, "_commit_hash", None)
    return LoadedModel(model, tok, family, target, revision, tokenizer_source=tokenizer or target)


def tokenize_prompts(tokenizer, prompts: list[str], max_tokens: int) -> np.ndarray:
    """Token ids (P, T) with T = max_tokens; every prompt must be long enough."""
    rows = []
    for k, text in enumerate(prompts):
        ids = tokenizer(text, truncation=True, max_length=max_tokens)["input_ids"]
        if len(ids) < max_tokens:
            raise ValueError(
                f"prompt {k} has only {len(ids)} tokens but max_tokens is {max_tokens}; fix: lengthen the prompt in "
                f"the prompts file or lower max_tokens"
            )
        rows.append(ids[:max_tokens])
    return np.asarray(rows, dtype=np.int64)


def model_tokenizer(model_cfg: dict):
    """The configured model's tokenizer alone, without its weights (the synthetic model: the embedded one's)."""
    if is_synthetic(model_cfg):
        from attncert.model.random_gpt2 import random_gpt2_tokenizer

        return random_gpt2_tokenizer()
    return load_tokenizer(resolve(model_cfg))


def check_texts(model_cfg: dict, prompts: list[str], max_tokens: int, passage: str | None = None,
                length: int = 0) -> None:
    """Before any job: under the model's tokenizer every prompt has `max_tokens` tokens and the long-context
    passage `length`; ValueError (one line naming the fix) otherwise."""
    tokenizer = model_tokenizer(model_cfg)
    tokenize_prompts(tokenizer, prompts, max_tokens)
    if passage is not None:
        n = len(tokenizer(passage, verbose=False)["input_ids"])
        if n < length:
            raise ValueError(f"the long-context passage has {n} tokens under this model's tokenizer but "
                             f"long_context.lengths asks for {length}; fix: use lengths up to {n} or a longer passage")


def _blocks(model, family):
    return model.h if family == "gpt2" else model.encoder.layer


def head_weights(model, family: str, layer: int) -> dict[str, np.ndarray]:
    """Per-head projection matrices of one block, in row-vector orientation."""
    cfg = model.config
    H = cfg.num_attention_heads
    block = _blocks(model, family)[layer]
    if family == "gpt2":
        d = cfg.hidden_size
        W = block.attn.c_attn.weight.detach().double().numpy()  # Conv1D: (d, 3d), y = x W + b
        b = block.attn.c_attn.bias.detach().double().numpy()
        Wq, Wk, Wv = W[:, :d], W[:, d:2 * d], W[:, 2 * d:]
        bq, bk, bv = b[:d], b[d:2 * d], b[2 * d:]
        Wo = block.attn.c_proj.weight.detach().double().numpy()  # (d, d): out = o W_o + b
        bo = block.attn.c_proj.bias.detach().double().numpy()
    else:
        sa = block.attention.self
        Wq, Wk, Wv = (m.weight.detach().double().numpy().T for m in (sa.query, sa.key, sa.value))
        bq, bk, bv = (m.bias.detach().double().numpy() for m in (sa.query, sa.key, sa.value))
        dense = block.attention.output.dense
        Wo = dense.weight.detach().double().numpy().T
        bo = dense.bias.detach().double().numpy()
    d = Wq.shape[0]
    dh = d // H

    def split_cols(M):
        return np.stack([M[:, h * dh:(h + 1) * dh] for h in range(H)])

    def split_vec(v):
        return np.stack([v[h * dh:(h + 1) * dh] for h in range(H)])

    return {
        "W_Q": split_cols(Wq), "W_K": split_cols(Wk), "W_V": split_cols(Wv),
        "b_Q": split_vec(bq), "b_K": split_vec(bk), "b_V": split_vec(bv),
        "W_O": np.stack([Wo[h * dh:(h + 1) * dh, :] for h in range(H)]), "b_O": bo,
    }


def block_rest_weights(model, family: str, layer: int) -> dict[str, np.ndarray]:
    """The MLP, the post-attention LayerNorm and the activation name of one block."""
    cfg = model.config
    block = _blocks(model, family)[layer]

    def f64(t):
        return t.detach().double().numpy()

    if family == "gpt2":
        if not getattr(cfg, "scale_attn_weights", True) or getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
            raise ValueError(
                "only GPT-2 attention scaled by 1/sqrt(d_h) is supported; fix: use a standard GPT-2 config"
            )
        W1, b1, W2, b2 = (f64(m) for m in (block.mlp.c_fc.weight, block.mlp.c_fc.bias, block.mlp.c_proj.weight,
                                           block.mlp.c_proj.bias))
        ln, act = block.ln_2, cfg.activation_function
    else:
        if getattr(block.attention.self, "position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported; fix: use a standard BERT config")
        W1, b1 = f64(block.intermediate.dense.weight).T, f64(block.intermediate.dense.bias)
        W2, b2 = f64(block.output.dense.weight).T, f64(block.output.dense.bias)
        ln, act = block.attention.output.LayerNorm, cfg.hidden_act
    return {"mlp_W_1": W1, "mlp_b_1": b1, "mlp_W_2": W2, "mlp_b_2": b2, "ln_attn_gain": f64(ln.weight),
            "ln_attn_bias": f64(ln.bias), "ln_attn_eps": np.float64(ln.eps),
            "activation": np.str_(act if isinstance(act, str) else "")}


def reading_layernorm(model, family: str, layer: int):
    """The LayerNorm module whose output the heads of `layer` read."""
    if family == "gpt2":
        return _blocks(model, family)[layer].ln_1
    if layer == 0:
        return model.embeddings.LayerNorm
    return _blocks(model, family)[layer - 1].output.LayerNorm


def output_projection(model, family: str, layer: int):
    block = _blocks(model, family)[layer]
    return block.attn.c_proj if family == "gpt2" else block.attention.output.dense


@torch.no_grad()
def extract_layers(model, family: str, token_ids: np.ndarray, layers: list[int]) -> dict[int, dict]:
    """Run the prompts and collect, per layer, weights + the normalized tokens each head reads."""
    cfg = model.config
    H = cfg.num_attention_heads
    P, T = token_ids.shape
    captured: dict[int, list] = {L: [] for L in layers}
    normalized: dict[int, list] = {L: [] for L in layers}
    hooks = []
    for L in layers:
        hooks.append(output_projection(model, family, L).register_forward_pre_hook(
            lambda mod, args, L=L: captured[L].append(args[0].detach().clone())))
        if family == "gpt2":
            hooks.append(reading_layernorm(model, family, L).register_forward_hook(
                lambda mod, args, out, L=L: normalized[L].append(out.detach().clone())))
    residuals = []
    try:
        for p in range(P):
            ids = torch.as_tensor(token_ids[p:p + 1])
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
            residuals.append([h[0].double().numpy() for h in out.hidden_states])
    finally:
        for hk in hooks:
            hk.remove()
    result = {}
    for L in layers:
        arrays = head_weights(model, family, L)
        arrays.update(block_rest_weights(model, family, L))
        residual = np.stack([residuals[p][L] for p in range(P)])  # (P, T, d)
        if family == "gpt2":
            Z = np.stack([t[0].double().numpy() for t in normalized[L]])
        else:
            Z = residual.copy()
        ctx = np.stack([t[0].double().numpy() for t in captured[L]])  # (P, T, d)
        dh = ctx.shape[-1] // H
        head_out = ctx.reshape(P, T, H, dh).transpose(0, 2, 1, 3)
        ln = reading_layernorm(model, family, L)
        arrays.update({
            "Z": Z, "residual": residual, "head_output": head_out, "token_ids": token_ids,
            "ln_gain": ln.weight.detach().double().numpy(), "ln_bias": ln.bias.detach().double().numpy(),
            "ln_eps": np.float64(ln.eps), "causal": np.bool_(family == "gpt2"),
        })
        result[L] = arrays
    return result


def recompute_head_output(arrays: dict, head: int, prompt: int) -> np.ndarray:
    """Attention output (T, d_h) of one head, recomputed from the extracted arrays alone."""
    Z = arrays["Z"][prompt]
    q = Z @ arrays["W_Q"][head] + arrays["b_Q"][head]
    k = Z @ arrays["W_K"][head] + arrays["b_K"][head]
    v = Z @ arrays["W_V"][head] + arrays["b_V"][head]
    s = q @ k.T / np.sqrt(q.shape[1])
    if bool(arrays["causal"]):
        s = np.where(np.tril(np.ones_like(s, dtype=bool)), s, -np.inf)
    a = np.exp(s - s.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    return a @ v


def load_layer(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an extracted layer file, after checking it against its sidecar (`IntermediateError` if
    it is missing, truncated or edited)."""
    with np.load(verify_intermediate(path), allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def extract_lengths(loaded: LoadedModel, text: str, lengths: list[int], layer: int) -> dict[str, np.ndarray]:
    """One passage read at several context lengths T: the layer's head weights once, and per T the normalized
    tokens `Z_{T}` (1, T, d) of the passage cut to its first T tokens (its own forward pass: with
    bidirectional attention a prefix is a different context). For the long-context experiment."""
    cap = int(getattr(loaded.model.config, "max_position_embeddings", getattr(loaded.model.config, "n_positions", 0)))
    out: dict[str, np.ndarray] = {}
    for T in sorted(int(t) for t in lengths):
        if cap and T > cap:
            raise ValueError(f"length {T} exceeds the model's {cap} positions; fix: keep long_context.lengths <= {cap}")
        ids = tokenize_prompts(loaded.tokenizer, [text], T)
        arrays = extract_layers(loaded.model, loaded.family, ids, [layer])[layer]
        out[f"Z_{T}"] = arrays["Z"]
        out[f"token_ids_{T}"] = ids
        for key in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O", "causal"):
            out[key] = arrays[key]
    return out
