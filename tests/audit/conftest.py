"""A tiny certified layer on disk, written the way the certify_layer job writes it (tables, certificates,
specification, extracted weights, each with its sidecar)."""
import shutil

import numpy as np
import pytest

from attncert.certify.certificate_store import write_certificates
from attncert.certify.layer_run import certify_layer_units
from attncert.head.units import grid, specification_vectors, write_specification
from attncert.pipeline.provenance import atomic_path, provenance, write_sidecar
from intermediate_files import tiny_layer_arrays

MODEL = "m"
QP = 3


def write_layer(root, layer: int, seed: int = 0):
    arrays = tiny_layer_arrays()
    if seed:
        rng = np.random.default_rng(seed)
        arrays = {k: (v + 0.3 * rng.standard_normal(v.shape) if v.dtype == np.float64 else v) for k, v in arrays.items()}
    ext = root / "extract" / MODEL / f"layer{layer}.npz"
    with atomic_path(ext) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    write_sidecar(ext, provenance({"code": "t"}, stage="extract", model_id=MODEL, layer=layer))
    base = root / "certify" / MODEL
    spec = specification_vectors(arrays, layer, [QP], 0)
    write_specification(base / f"layer{layer}_spec.npz", spec, [QP], layer, 0)
    units = grid([0, 1], [0], [QP], [0.01, 0.2], ["linf", "l2"], ["fixed", "varying"], layer)
    df, entries, pool = certify_layer_units(arrays, spec, [QP], units, layer, ascent_check_fraction=0.0)
    write_certificates(base / f"layer{layer}_certificates.npz", entries, pool)
    write_sidecar(base / f"layer{layer}_certificates.npz", provenance({"code": "t"}, stage="certify"))
    with atomic_path(base / f"layer{layer}.csv") as tmp:
        df.to_csv(tmp, index=False, float_format="%.17g")
    write_sidecar(base / f"layer{layer}.csv", provenance({"code": "t"}, stage="certify"))
    return df


@pytest.fixture(scope="session")
def certified_root(tmp_path_factory):
    """data/ of two tiny certified layers (layer 1 has other weights), built once."""
    root = tmp_path_factory.mktemp("audit") / "data"
    write_layer(root, 0)
    write_layer(root, 1, seed=1)
    return root


@pytest.fixture
def data_root(certified_root, tmp_path):
    """A fresh copy of the certified data/ that a test may tamper with."""
    dst = tmp_path / "data"
    shutil.copytree(certified_root, dst)
    return dst
