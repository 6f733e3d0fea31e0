"""The certification unit of one head of a local checkpoint, read on a text: the checked library path.

`checkpoint_head` loads the checkpoint with `transformers` (`model.extraction.load_model`, offline for a
local folder), tokenizes the text, runs it through the model once and extracts the one layer exactly as the
pipeline does (`model.extraction.extract_layers`: the normalized tokens the layer's heads read, the head
matrices in row-vector orientation), draws the specification c the pipeline would draw for that unit
(`head.units.specification_vectors`, prompt index 0) and builds the `HeadProblem` through
`head.units.head_problem`. Every choice is checked before any work, with one line naming the valid range:
the layer against the model's layers, the head against its heads, the query position against the text's
tokens, the token ids against the model's vocabulary; a folder without tokenizer files is refused unless a
tokenizer is named (transformers would build a near-empty one on the fly that reads any text as a few special
tokens); `HeadProblem` itself rejects empty, NaN or infinite inputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attncert.checkpoint.checkpoint_input import CheckpointInputError
from attncert.checkpoint.family import checkpoint_config, checkpoint_family
from attncert.head.problem import MODES, NORMS, HeadProblem
from attncert.head.units import Unit, head_problem, specification_vectors
from attncert.model.model_source import (EMBEDDED, TOKENIZER_FILES, config_dimensions, embedded_model_dir,
                                         has_tokenizer_files)

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog."


@dataclass(frozen=True)
class HeadRequest:
    """What to certify: a checkpoint folder (None: the embedded all-MiniLM-L6-v2), its family (None: read from
    its config), a text, and the unit (layer, head, query position, radius, norm, mode, specification seed).
    `max_tokens` cuts the text's tokens (None: all, up to the model's positions); `tokenizer` is a tokenizer folder
    or hub id (None: the checkpoint's own)."""
    model_dir: str | None = None
    family: str | None = None
    text: str = DEFAULT_TEXT
    layer: int = 2
    head: int = 5
    query_position: int = 4
    radius: float = 0.002
    norm: str = "linf"
    mode: str = "fixed"
    spec_seed: int = 0
    max_tokens: int | None = None
    tokenizer: str | None = None


def _in_range(name: str, value: int, count: int, what: str) -> None:
    if not 0 <= value < count:
        raise CheckpointInputError(f"{name} {value} is out of range: {what}; fix: use {name} 0..{count - 1}")


def check_request(req: HeadRequest) -> tuple[Path, str, tuple[int, int, int]]:
    """(checkpoint folder, family, (layers, heads, positions)) after checking everything but the query position
    (which needs the text's tokens); CheckpointInputError (one line) otherwise."""
    model_dir = Path(req.model_dir).expanduser() if req.model_dir else embedded_model_dir()
    family = checkpoint_family(model_dir, req.family)
    if req.tokenizer is None and not has_tokenizer_files(model_dir):
        raise CheckpointInputError(f"--model-dir {str(model_dir)!r} holds no tokenizer (none of "
                                   f"{', '.join(TOKENIZER_FILES)}); fix: save the model's tokenizer into it with "
                                   f"tokenizer.save_pretrained(DIR), or pass --tokenizer NAME_OR_DIR")
    dims = config_dimensions(checkpoint_config(model_dir))
    _in_range("--layer", req.layer, dims[0], f"the model has {dims[0]} layers")
    _in_range("--head", req.head, dims[1], f"each layer has {dims[1]} heads")
    if req.norm not in NORMS:
        raise CheckpointInputError(f"--norm {req.norm!r} is not one of {', '.join(NORMS)}; fix: --norm linf or l2")
    if req.mode not in MODES:
        raise CheckpointInputError(
            f"--mode {req.mode!r} is not one of {', '.join(MODES)}; fix: --mode fixed or varying"
        )
    if not (req.radius > 0 and req.radius < float("inf")):
        raise CheckpointInputError(f"--radius {req.radius} is not a positive finite number; fix: e.g. --radius 0.002")
    if not req.text.strip():
        raise CheckpointInputError("the text is empty; fix: pass a non-empty --text or --prompt-file")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise CheckpointInputError(f"--max-tokens {req.max_tokens} is below 1; fix: --max-tokens 8 (or leave it out)")
    return model_dir, family, dims


def checkpoint_head(req: HeadRequest) -> HeadProblem:
    """The HeadProblem of `req`: the one head's weights and the normalized tokens it reads on `req.text`, the
    perturbation ball, and the pipeline's specification c for (layer, head, prompt 0, query position)."""
    import numpy as np

    from attncert.model.extraction import extract_layers, load_model

    model_dir, family, (_, _, positions) = check_request(req)
    source = str(model_dir) if req.model_dir is not None and model_dir != embedded_model_dir() else EMBEDDED
    loaded = load_model({"name": model_dir.name, "source": source, "family": family}, tokenizer=req.tokenizer)
    ids = loaded.tokenizer(req.text)["input_ids"][:min(positions, req.max_tokens or positions)]
    if not ids:
        raise CheckpointInputError("the text has no tokens; fix: pass a non-empty --text or --prompt-file")
    vocabulary = int(loaded.model.config.vocab_size)
    if max(ids) >= vocabulary:
        raise CheckpointInputError(f"the tokenizer gives token id {max(ids)} but the model has {vocabulary} "
                                   "embeddings; fix: use the checkpoint's own tokenizer (--tokenizer)")
    _in_range("--query-position", req.query_position, len(ids), f"the text has {len(ids)} tokens")
    token_ids = np.asarray([ids], dtype=np.int64)
    arrays = extract_layers(loaded.model, family, token_ids, [req.layer])[req.layer]
    spec = specification_vectors(arrays, req.layer, [req.query_position], req.spec_seed)
    unit = Unit(req.layer, req.head, 0, req.query_position, float(req.radius), req.norm, req.mode)
    return head_problem(arrays, spec, [req.query_position], unit)
