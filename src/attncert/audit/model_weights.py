"""The weights are the model's: every extracted array tied to the checkpoint the run names, without torch.

A sidecar is a checksum, not a signature: whoever edits `data/extract/{model}/layer{L}.npz` or
`data/long_context/{model}/layer_tokens.npz` can recompute it, and every other check of the audit then confirms
certificates of a model that does not exist. This module reads the checkpoint itself — located from the run's
`model` section as the pipeline locates it (`attncert.provenance.checkpoint_files`) — and compares, per file:

`checkpoint_files`   the sha256 of every checkpoint file the extraction's sidecar recorded equals the file's now
                     (a recorded file missing or changed fails; so does a sidecar without the hashes, or one that
                     misses a file this audit reads: the safetensors files, config.json, tokenizer.json). It ties
                     the extraction to the checkpoint it read; by itself it proves nothing about the arrays.
`attention_weights`, `layernorm`, `block_weights`
                     every weight array of the file equals the checkpoint's tensor, cut and transposed as the
                     extraction does (`checkpoint_tensors.layer_arrays`), exactly: tolerance 0. The file's float32
                     (or float16) becomes float64 exactly, and the extraction's `.double()`, transposes and slices
                     are exact too, so any difference at all is another weight (the epsilons against config.json).
`layout`             the activation's name and the causal flag, against config.json.
`token_ids`          the stored ids are a fresh tokenization of the configured prompts (the long-context passage)
                     cut to the stored length, by the checkpoint's tokenizer.json (the `tokenizers` library, padding
                     off, truncation at the stored length, special tokens added as the pipeline's tokenizer adds
                     them). Without a tokenizer.json, prompts or passage the ids are not re-tokenized: `not covered`,
                     with the reason (the other checks still run on the stored ids).
`Z`, `residual`, `head_output`
                     the stored activations equal those of an independent numpy float64 forward pass of the
                     checkpoint on the stored ids (`reference_forward`), to within 1e-9 x max|array| per array. Both
                     are float64; they differ by summation order only (torch's kernels vs numpy's), measured on the
                     default run at 7.6e-15 at most (Z at T = 512, max|Z| ~ 8: 1e-15 relative) and below 1e-12 on the
                     tiny test models — the tolerance sits ~10^6 above that. It sits far below anything a certificate
                     resolves: the smallest radius of the shipped configurations is 1e-4 in these units (the block
                     stage's box; the certification grid's is 5e-4), and a stored Z off by 1e-9 max|Z| (~1e-8 for
                     the default model) is a centre moved by 1e-4 of that radius. A Z entry moved by 1e-6 fails.

Records are `table_coverage._row_record`'s dict format with table "weights", check "weights", one per (file,
array group), `number` naming the group, `margins` each array's largest difference, `margin` the tolerance minus
the largest difference (negative on a fail; -inf when there is nothing to compare). The synthetic `random-gpt2`
has no checkpoint (its weights are drawn from a seed by torch, not re-derivable without it): one `not covered`
record. Trusted base: numpy, scipy.special.erf, safetensors.numpy, tokenizers and the stdlib; no torch, no
transformers.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from attncert.audit.checkpoint_tensors import CheckpointUnreadable, Weights, layer_arrays, load_tensors, read_config
from attncert.audit.reference_forward import forward
from attncert.integrity.file_integrity import sidecar_path
from attncert.integrity.intermediate_check import regenerate_command, verify_intermediate
from attncert.provenance.checkpoint_files import (SYNTHETIC_NOTE, CheckpointNotFound, checkpoint_directory,
                                                  checkpoint_file_hashes)

ACTIVATION_RTOL = 1e-9
GROUPS = {
    "attention_weights": ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O", "b_O"),
    "layernorm": ("ln_gain", "ln_bias", "ln_eps"),
    "block_weights": ("mlp_W_1", "mlp_b_1", "mlp_W_2", "mlp_b_2", "ln_attn_gain", "ln_attn_bias", "ln_attn_eps"),
}
# what `extraction.extract_lengths` stores of the layer (no b_O: the long-context units do not read it)
LONG_CONTEXT_GROUPS = {"attention_weights": ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O", "causal")}


def record(layer, number: str, status: str, reason: str, margin: float = math.nan, margins: str = "",
           length="") -> dict:
    return {"table": "weights", "layer": layer, "row": -1, "head": "", "prompt": "", "query_pos": "", "radius": "",
            "norm": "", "mode": "", "length": length, "number": number, "reported": math.nan, "status": status,
            "check": "weights", "margin": margin, "reason": reason, "margins": margins}


def prompts_of(config: dict, base_dir: Path = Path(".")) -> list[str]:
    """The run's prompts as the extraction reads them: the first `n_prompts` non-blank lines of the `prompts` file,
    stripped (`configuration.config.read_prompts`, which the trusted base cannot import)."""
    lines = (Path(base_dir) / config["prompts"]).read_text().splitlines()
    return [s.strip() for s in lines if s.strip()][:int(config["n_prompts"])]


class Checkpoint:
    """The located checkpoint: its folder, its files' hashes, config, tensors and tokenizer."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.hashes = checkpoint_file_hashes(directory)
        self.cfg = read_config(directory)
        self.weights = Weights(load_tensors(directory, self.cfg.family))
        self.read_files = {p.relative_to(directory).as_posix() for p in directory.glob("*.safetensors")} | {
            "config.json"} | ({"tokenizer.json"} if "tokenizer.json" in self.hashes else set())
        self._traces: dict = {}
        self._tokenizer = None

    def tokenize(self, text: str, length: int) -> list[int] | None:
        if "tokenizer.json" not in self.hashes:
            return None
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(str(self.directory / "tokenizer.json"))
            self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=length)
        return self._tokenizer.encode(text).ids

    def trace(self, ids: np.ndarray, layers: list[int]):
        key = (np.asarray(ids).tobytes(), tuple(layers))
        if key not in self._traces:
            self._traces[key] = forward(self.weights, self.cfg, ids, layers)
        return self._traces[key]


def hash_record(path: Path, layer, ckpt: Checkpoint) -> dict:
    side = json.loads(sidecar_path(path).read_text(encoding="utf-8"))
    recorded = side.get("checkpoint_files")
    if not isinstance(recorded, dict) or not recorded:
        return record(layer, "checkpoint_files", "fail", f"{path.name}: its sidecar records no checkpoint file hashes; "
                      f"fix: regenerate it with: {regenerate_command(path)}", -math.inf)
    changed = sorted(n for n, sha in recorded.items() if ckpt.hashes.get(n) != sha)
    unrecorded = sorted(ckpt.read_files - set(recorded))
    if changed or unrecorded:
        why = "; ".join(([f"differ from or are missing in {ckpt.directory}: {', '.join(changed)}"] if changed else [])
                        + ([f"not recorded: {', '.join(unrecorded)}"] if unrecorded else []))
        return record(layer, "checkpoint_files", "fail", f"{path.name}: checkpoint files {why}", -math.inf,
                      margins=f"{len(changed)} changed, {len(unrecorded)} unrecorded")
    elsewhere = "" if str(side.get("checkpoint_dir")) == str(ckpt.directory) else \
        f" (recorded in {side.get('checkpoint_dir')}, found in {ckpt.directory})"
    return record(layer, "checkpoint_files", "pass", f"{path.name}: {len(recorded)} checkpoint files hash as its "
                  f"sidecar records{elsewhere}", 0.0)


def _difference(stored, expected) -> float:
    stored, expected = np.asarray(stored), np.asarray(expected)
    if stored.shape != expected.shape:
        return math.inf
    if stored.dtype.kind in "US" or expected.dtype.kind in "US" or stored.dtype == bool:
        return 0.0 if np.array_equal(stored, expected) else math.inf
    with np.errstate(invalid="ignore"):
        diff = np.abs(stored.astype(np.float64) - expected.astype(np.float64))
    return float(np.nanmax(np.where(np.isnan(diff), np.inf, diff))) if diff.size else 0.0


def weight_records(path: Path, layer, arrays: dict, expected: dict, groups: dict) -> list[dict]:
    """One record per group: every array equal to the checkpoint's, exactly."""
    out = []
    for group, names in groups.items():
        missing = [n for n in names if n not in arrays]
        diffs = {n: _difference(arrays[n], expected[n]) for n in names if n not in missing}
        worst = max(diffs.values(), default=0.0)
        margins = "; ".join(f"{n} {v:.3g}" for n, v in diffs.items())
        if missing or worst > 0:
            bad = [n for n, v in diffs.items() if v > 0]
            why = (f"missing {', '.join(missing)}; " if missing else "") + (
                f"differ from the checkpoint: {', '.join(bad)} (largest |difference| {worst:.3g})" if bad else "")
            out.append(record(layer, group, "fail", f"{path.name}: {why.rstrip('; ')}", -worst if not missing else
                              -math.inf, margins))
        else:
            out.append(record(layer, group, "pass", f"{path.name}: {', '.join(names)} equal the checkpoint's "
                              "exactly", 0.0, margins))
    return out


def activation_record(path: Path, layer, name: str, stored, reference, length="") -> dict:
    stored, reference = np.asarray(stored, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    diff = _difference(stored, reference)
    tol = ACTIVATION_RTOL * float(np.abs(reference).max()) if reference.size else 0.0
    what = f"{path.name}: {name}{f' (T = {length})' if length != '' else ''}"
    margins = f"max|difference| {diff:.3g}; tolerance {tol:.3g} = {ACTIVATION_RTOL:g} max|{name}|"
    if diff <= tol:
        return record(layer, name, "pass", f"{what} equals the numpy forward pass of the checkpoint", tol - diff,
                      margins, length)
    return record(layer, name, "fail", f"{what} differs from the numpy forward pass of the checkpoint by {diff:.3g} "
                  f"(tolerance {tol:.3g})", tol - diff if math.isfinite(diff) else -math.inf, margins, length)


def token_record(path: Path, layer, ids: np.ndarray, texts: list[str] | None, ckpt: Checkpoint, source: str,
                 length="") -> dict:
    ids = np.atleast_2d(np.asarray(ids))
    if texts is None:
        return record(layer, "token_ids", "not covered", f"{path.name}: token ids not re-tokenized (no {source} given)",
                      length=length)
    if ids.shape[0] != len(texts):
        return record(layer, "token_ids", "fail", f"{path.name}: {ids.shape[0]} token rows, {len(texts)} {source}",
                      -math.inf, length=length)
    fresh = [ckpt.tokenize(t, ids.shape[1]) for t in texts]
    if fresh[0] is None:
        return record(layer, "token_ids", "not covered", f"{path.name}: token ids not re-tokenized (the checkpoint "
                      "has no tokenizer.json)", length=length)
    bad = [k for k, row in enumerate(fresh) if list(row) != ids[k].tolist()]
    if bad:
        return record(layer, "token_ids", "fail", f"{path.name}: token ids of {source} {bad} are not the tokenizer's",
                      -math.inf, length=length)
    return record(layer, "token_ids", "pass", f"{path.name}: token ids are the tokenizer's of the {source}", 0.0,
                  length=length)


def layer_file_records(path: Path, layer: int, ckpt: Checkpoint, prompts, all_layers: list[int]) -> list[dict]:
    with np.load(verify_intermediate(path), allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    out = [hash_record(path, layer, ckpt)]
    expected = layer_arrays(ckpt.weights, ckpt.cfg, layer)
    out += weight_records(path, layer, arrays, expected, GROUPS)
    flags = {"activation": np.str_(ckpt.cfg.activation), "causal": np.bool_(ckpt.cfg.family == "gpt2")}
    out += weight_records(path, layer, arrays, flags, {"layout": tuple(flags)})
    ids = arrays["token_ids"]
    out.append(token_record(path, layer, ids, prompts, ckpt, "prompts"))
    traces = [ckpt.trace(row, all_layers)[layer] for row in ids]
    for name in ("Z", "residual", "head_output"):
        ref = np.stack([getattr(t, name) for t in traces])
        out.append(activation_record(path, layer, name, arrays.get(name, np.empty(0)), ref))
    return out


def long_context_records(path: Path, long_context: dict, ckpt: Checkpoint, base_dir: Path) -> list[dict]:
    layer = int(long_context["layer"])
    with np.load(verify_intermediate(path), allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    out = [hash_record(path, layer, ckpt)]
    expected = layer_arrays(ckpt.weights, ckpt.cfg, layer)
    expected["causal"] = np.bool_(ckpt.cfg.family == "gpt2")
    out += weight_records(path, layer, arrays, expected, LONG_CONTEXT_GROUPS)
    passage_file = Path(base_dir) / str(long_context["passage"])
    passage = [passage_file.read_text(encoding="utf-8")] if passage_file.is_file() else None
    stored = sorted(int(k[2:]) for k in arrays if k.startswith("Z_") and k[2:].isdigit())
    for T in sorted({int(t) for t in long_context.get("lengths", [])} - set(stored)):
        out.append(record(layer, "Z", "fail", f"{path.name}: no tokens at the configured length {T}", -math.inf,
                          length=T))
    for T in stored:
        ids = arrays.get(f"token_ids_{T}", np.zeros((1, 0), dtype=np.int64))
        out.append(token_record(path, layer, ids, passage, ckpt, "passage", length=T))
        ref = ckpt.trace(np.atleast_2d(ids)[0], [layer])[layer].Z[None]
        out.append(activation_record(path, layer, "Z", arrays[f"Z_{T}"], ref, length=T))
    return out


def audit_model_weights(root: Path, model: str, model_cfg: dict, layers: list[int], long_context: dict | None,
                        prompts: list[str] | None, base_dir: Path = Path(".")) -> list[dict]:
    """Records (table "weights") tying `root/extract/{model}/layer{L}.npz` for every L in `layers` and, when
    `long_context` (the configuration's section) is given, `root/long_context/{model}/layer_tokens.npz`, to the
    checkpoint of `model_cfg` (the configuration's `model` section). `prompts`: the run's prompt texts
    (`prompts_of(config)`), None to skip their re-tokenization; the passage is `base_dir / long_context.passage`."""
    root, base_dir = Path(root), Path(base_dir)
    if str(model_cfg.get("source")) == "random-gpt2":
        return [record("", "checkpoint", "not covered", SYNTHETIC_NOTE + "; the weights cannot be re-derived without "
                       "torch, so the extracted arrays are not compared")]
    files = [(root / "extract" / model / f"layer{L}.npz", L) for L in layers]
    if long_context:
        files.append((root / "long_context" / model / "layer_tokens.npz", int(long_context["layer"])))
    try:
        directory = checkpoint_directory(model_cfg)
        ckpt = Checkpoint(directory)
        if ckpt.cfg.family != model_cfg.get("family"):
            raise CheckpointUnreadable(f"it is a {ckpt.cfg.family} model, the configuration says "
                                       f"{model_cfg.get('family')}")
    except (CheckpointNotFound, CheckpointUnreadable) as e:
        return [record(L, "checkpoint", "fail", f"{p.name}: the checkpoint cannot be compared: {e}", -math.inf)
                for p, L in files]
    out = []
    for k, (path, L) in enumerate(files):
        try:
            out += (layer_file_records(path, L, ckpt, prompts, sorted(layers)) if k < len(layers)
                    else long_context_records(path, long_context, ckpt, base_dir))
        except (CheckpointUnreadable, KeyError, IndexError, ValueError) as e:  # a foreign layout: that file fails
            out.append(record(L, "layout", "fail", f"{path.name}: cannot be compared with the checkpoint "
                              f"({type(e).__name__}: {str(e)[:120]})", -math.inf))
    return out
