"""A checkpoint's tensors read without torch, and the arrays the extraction stores for a layer, cut from them.

The tensors come from the checkpoint's safetensors files (`safetensors.numpy.load_file`; a sharded checkpoint's
`model.safetensors.index.json` names its files), keyed by the module path of the model that wrote them. A
`save_pretrained` of `BertModel` or of the embedded sentence-transformers model writes `embeddings.*`,
`encoder.layer.{L}.*`; a task model writes the same under `bert.`; `GPT2Model` writes `wte`, `wpe`, `h.{L}.*`,
`GPT2LMHeadModel` the same under `transformer.`. The prefix is found from the token embedding's key and
stripped; the old names `LayerNorm.gamma` / `beta` read as `weight` / `bias` (as transformers renames them).

`layer_arrays` gives, in float64 and in the extraction's orientation (row vectors, `q = z @ W_Q[h] + b_Q[h]`;
`attncert.model.extraction`), every weight array of an extracted layer file:

    BERT (Linear weights are stored (out, in): transposed)      GPT-2 (Conv1D weights are stored (in, out))
    W_Q, W_K, W_V, b_*  attention.self.{query,key,value}        attn.c_attn, split in thirds
    W_O, b_O            attention.output.dense                  attn.c_proj
    ln_gain, ln_bias    embeddings.LayerNorm (L = 0), else      ln_1
                        layer L-1's output.LayerNorm
    mlp_W_1, mlp_b_1    intermediate.dense                      mlp.c_fc
    mlp_W_2, mlp_b_2    output.dense                            mlp.c_proj
    ln_attn_*           attention.output.LayerNorm              ln_2

with the heads split as the extraction splits them (head h owns columns h d_h .. (h+1) d_h of W_Q, W_K, W_V and
the same rows of W_O), and the epsilons and the activation name from `config.json`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

EMBEDDING_KEYS = {"bert": "embeddings.word_embeddings.weight", "gpt2": "wte.weight"}


class CheckpointUnreadable(RuntimeError):
    """The checkpoint's tensors cannot be read with numpy (no safetensors file, a dtype numpy lacks, a missing key)."""


@dataclass(frozen=True)
class ModelConfig:
    """What the forward pass and the arrays need from `config.json` (transformers' defaults where a key is absent)."""

    family: str
    n_layers: int
    n_heads: int
    eps: float
    activation: str

    @classmethod
    def from_json(cls, cfg: dict) -> ModelConfig:
        family = str(cfg.get("model_type", ""))
        if family == "gpt2":
            if not cfg.get("scale_attn_weights", True) or cfg.get("scale_attn_by_inverse_layer_idx", False):
                raise CheckpointUnreadable("GPT-2 attention not scaled by 1/sqrt(d_h) (as the extraction requires)")
            return cls("gpt2", int(cfg.get("n_layer", 12)), int(cfg.get("n_head", 12)),
                       float(cfg.get("layer_norm_epsilon", 1e-5)), str(cfg.get("activation_function", "gelu_new")))
        if family == "bert":
            if cfg.get("position_embedding_type", "absolute") != "absolute":
                raise CheckpointUnreadable("BERT position embeddings are not absolute (as the extraction requires)")
            return cls("bert", int(cfg.get("num_hidden_layers", 12)), int(cfg.get("num_attention_heads", 12)),
                       float(cfg.get("layer_norm_eps", 1e-12)), str(cfg.get("hidden_act", "gelu")))
        raise CheckpointUnreadable(f"model_type {family!r} is neither gpt2 nor bert")


def read_config(directory: Path) -> ModelConfig:
    try:
        return ModelConfig.from_json(json.loads((Path(directory) / "config.json").read_text()))
    except (OSError, ValueError) as e:
        raise CheckpointUnreadable(f"config.json cannot be read ({type(e).__name__})") from None


def safetensors_files(directory: Path) -> list[Path]:
    directory = Path(directory)
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [directory / n for n in names]
    return sorted(directory.glob("*.safetensors"))


def _canonical(key: str) -> str:
    if key.endswith("LayerNorm.gamma"):
        return key[:-len("gamma")] + "weight"
    if key.endswith("LayerNorm.beta"):
        return key[:-len("beta")] + "bias"
    return key


def load_tensors(directory: Path, family: str) -> dict[str, np.ndarray]:
    """The checkpoint's tensors as stored (their own dtype), keys without the model's prefix."""
    files = safetensors_files(directory)
    if not files:
        raise CheckpointUnreadable(f"{directory} has no safetensors file (a pytorch_model.bin needs torch to read)")
    raw: dict[str, np.ndarray] = {}
    for f in files:
        try:
            raw.update(load_file(str(f)))
        except Exception as e:  # noqa: BLE001 - bfloat16 (no numpy dtype), a damaged header: unreadable
            raise CheckpointUnreadable(f"{f.name} cannot be read by safetensors.numpy ({type(e).__name__}: "
                                       f"{str(e)[:80]})") from None
    anchor = EMBEDDING_KEYS[family]
    found = [k for k in raw if k == anchor or k.endswith("." + anchor)]
    if len(found) != 1:
        raise CheckpointUnreadable(f"the checkpoint has {len(found)} tensors named *{anchor}; expected one")
    prefix = found[0][:-len(anchor)]
    return {_canonical(k[len(prefix):]): v for k, v in raw.items() if k.startswith(prefix)}


class Weights:
    """The checkpoint's tensors by name, as float64 (every float32 / float16 is a float64 exactly)."""

    def __init__(self, tensors: dict[str, np.ndarray]):
        self.tensors = tensors
        self._float64: dict[str, np.ndarray] = {}

    def __call__(self, name: str) -> np.ndarray:
        if name not in self.tensors:
            raise CheckpointUnreadable(f"the checkpoint has no tensor {name!r}")
        if name not in self._float64:
            self._float64[name] = np.asarray(self.tensors[name], dtype=np.float64)
        return self._float64[name]


def _split_heads(W: np.ndarray, b: np.ndarray, H: int) -> tuple[np.ndarray, np.ndarray]:
    d, width = W.shape
    dh = width // H
    return (np.stack([W[:, h * dh:(h + 1) * dh] for h in range(H)]),
            np.stack([b[h * dh:(h + 1) * dh] for h in range(H)]))


def layer_arrays(w: Weights, cfg: ModelConfig, layer: int) -> dict[str, np.ndarray]:
    """Every weight array the extraction stores for `layer`, from the checkpoint (module docstring's table)."""
    H = cfg.n_heads
    if cfg.family == "gpt2":
        p = f"h.{layer}."
        W, b = w(p + "attn.c_attn.weight"), w(p + "attn.c_attn.bias")
        d = W.shape[0]
        qkv = [(W[:, k * d:(k + 1) * d], b[k * d:(k + 1) * d]) for k in range(3)]
        Wo, bo = w(p + "attn.c_proj.weight"), w(p + "attn.c_proj.bias")
        ln, ln_attn = p + "ln_1.", p + "ln_2."
        mlp = (w(p + "mlp.c_fc.weight"), w(p + "mlp.c_fc.bias"), w(p + "mlp.c_proj.weight"),
               w(p + "mlp.c_proj.bias"))
    else:
        p = f"encoder.layer.{layer}."
        qkv = [(w(p + f"attention.self.{m}.weight").T, w(p + f"attention.self.{m}.bias"))
               for m in ("query", "key", "value")]
        Wo, bo = w(p + "attention.output.dense.weight").T, w(p + "attention.output.dense.bias")
        ln = "embeddings.LayerNorm." if layer == 0 else f"encoder.layer.{layer - 1}.output.LayerNorm."
        ln_attn = p + "attention.output.LayerNorm."
        mlp = (w(p + "intermediate.dense.weight").T, w(p + "intermediate.dense.bias"),
               w(p + "output.dense.weight").T, w(p + "output.dense.bias"))
    out = {}
    for name, (Wm, bm) in zip("QKV", qkv):
        out[f"W_{name}"], out[f"b_{name}"] = _split_heads(Wm, bm, H)
    dh = Wo.shape[0] // H
    out["W_O"], out["b_O"] = np.stack([Wo[h * dh:(h + 1) * dh, :] for h in range(H)]), bo
    out["ln_gain"], out["ln_bias"], out["ln_eps"] = w(ln + "weight"), w(ln + "bias"), np.float64(cfg.eps)
    out["mlp_W_1"], out["mlp_b_1"], out["mlp_W_2"], out["mlp_b_2"] = mlp
    out["ln_attn_gain"], out["ln_attn_bias"] = w(ln_attn + "weight"), w(ln_attn + "bias")
    out["ln_attn_eps"] = np.float64(cfg.eps)
    return out
