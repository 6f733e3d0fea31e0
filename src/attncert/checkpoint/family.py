"""Which supported model family a local checkpoint folder holds, read from its `config.json`.

The supported families are the two whose heads `attncert.model.extraction` reads: GPT-2 (pre-LN, causal)
and BERT (post-LN, bidirectional). A checkpoint's `model_type` names its family; a `--family` given by the user
must agree with it.
"""
from __future__ import annotations

import json
from pathlib import Path

from attncert.checkpoint.checkpoint_input import CheckpointInputError

FAMILIES = ("gpt2", "bert")


def checkpoint_config(model_dir: str | Path) -> dict:
    """The parsed `config.json` of a `save_pretrained` folder (CheckpointInputError when absent or unreadable)."""
    path = Path(model_dir).expanduser() / "config.json"
    if not Path(model_dir).expanduser().is_dir():
        raise CheckpointInputError(f"--model-dir {str(model_dir)!r} is not a directory; fix: pass a folder written "
                                   "by transformers' save_pretrained (or omit --model-dir for the embedded model)")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointInputError(f"{path} cannot be read as a transformers config ({type(e).__name__}); fix: pass "
                                   "a folder written by save_pretrained") from None
    if not isinstance(cfg, dict):
        raise CheckpointInputError(f"{path} is not a JSON object; fix: pass a folder written by save_pretrained")
    return cfg


def checkpoint_family(model_dir: str | Path, family: str | None = None) -> str:
    """The family of the checkpoint: its config's `model_type`, which must be a supported one and agree with
    `family` when the user gave it."""
    model_type = checkpoint_config(model_dir).get("model_type")
    if model_type not in FAMILIES:
        raise CheckpointInputError(f"{model_dir} holds a {model_type!r} model; supported families: "
                                   f"{', '.join(FAMILIES)}; fix: pass a GPT-2 or BERT family checkpoint")
    if family is not None and family != model_type:
        raise CheckpointInputError(f"--family {family} but {model_dir} holds a {model_type!r} model; fix: "
                                   f"--family {model_type}, or leave --family out (it is read from the config)")
    return model_type
