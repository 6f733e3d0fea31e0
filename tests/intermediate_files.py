"""Tiny intermediate files written the way the pipeline's jobs write them (atomic rename, then the sidecar)."""
import numpy as np

from attncert.provenance.provenance import atomic_path, provenance, write_sidecar


def tiny_layer_arrays(H=2, P=1, T=4, d=6, dh=3) -> dict:
    rng = np.random.default_rng(0)
    return {"W_Q": rng.standard_normal((H, d, dh)), "W_K": rng.standard_normal((H, d, dh)),
            "W_V": rng.standard_normal((H, d, dh)), "b_Q": rng.standard_normal((H, dh)),
            "b_K": rng.standard_normal((H, dh)), "b_V": rng.standard_normal((H, dh)),
            "W_O": rng.standard_normal((H, dh, d)), "Z": rng.standard_normal((P, T, d)), "causal": np.bool_(True)}


def write_extracted(root, model="m", layer=0):
    """ROOT/data/extract/MODEL/layerL.npz of tiny_layer_arrays() and its sidecar, as the extract job writes them."""
    path = root / "data" / "extract" / model / f"layer{layer}.npz"
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **tiny_layer_arrays())
    write_sidecar(path, provenance({"code": "abc"}, stage="extract", model_id=model, layer=layer))
    return path
