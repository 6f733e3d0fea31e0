"""The certification grid: which units exist, their specification vectors, and how to rebuild one.

A *unit* is (model, layer, head, prompt, query_pos, radius, norm, mode). Its problem is fully
determined by two files on disk:

    data/extract/{model}/layer{L}.npz        head matrices and nominal normalized tokens
    data/certify/{model}/layer{L}_spec.npz   the specification vectors c (H, P, Q, d_h)

`load_unit` rebuilds the complete `HeadProblem` from those files alone, so anyone can re-check a
row of `data/certify/{model}/layer{L}.csv` independently of this pipeline. Both files are checked
against their sidecars first (`attncert.integrity.intermediate_check`).

Attended tokens: a causal head (GPT-2) at query position i reads positions 0..i; a bidirectional
head (BERT) reads all T positions of the prompt. Every attended token is perturbed.

Specification: c = W_O[h] u / ||W_O[h] u|| with u a standard-normal direction of the residual
stream drawn from the seed `spec_seed(base, layer, head, prompt, query_pos)`.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from attncert.model.extraction import load_layer
from attncert.integrity.intermediate_check import verify_intermediate
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar
from attncert.head.problem import HeadProblem
from attncert.head.specification import spec_seed, specification_direction
from attncert.head.unit_grid import Unit, grid  # noqa: F401 - re-exported: the grid is part of the units' API


def specification_vectors(arrays: dict, layer: int, query_positions: list[int], base_seed: int) -> np.ndarray:
    """c for every (head, prompt, query position): array (H, P, Q, d_h)."""
    H = arrays["W_O"].shape[0]
    P = arrays["Z"].shape[0]
    out = np.empty((H, P, len(query_positions), arrays["W_O"].shape[1]))
    for h, p, (qi, qp) in itertools.product(range(H), range(P), enumerate(query_positions)):
        out[h, p, qi] = specification_direction(arrays["W_O"][h], spec_seed(base_seed, layer, h, p, qp))
    return out


def write_specification(
    path: str | Path, c: np.ndarray, query_positions: list[int], layer: int, base_seed: int
) -> None:
    """The specification vectors of a layer and their sidecar (`path`.json)."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, c=c, query_positions=np.asarray(query_positions), layer=np.int64(layer),
                     base_seed=np.int64(base_seed))
    write_sidecar(path, provenance(None, stage="certify_spec", seeds={"spec_seed": int(base_seed)}, layer=int(layer),
                                   query_positions=[int(q) for q in query_positions], shape=list(c.shape)))


def load_specification(path: str | Path) -> tuple[np.ndarray, list[int]]:
    """(c, query positions) of a layer's specification file, after checking it against its sidecar."""
    with np.load(verify_intermediate(path), allow_pickle=False) as s:
        return s["c"], [int(q) for q in s["query_positions"]]


def attended(arrays: dict, prompt: int, query_pos: int) -> tuple[np.ndarray, int]:
    """Nominal attended tokens and the query's index among them."""
    Z = arrays["Z"][prompt]
    if query_pos >= Z.shape[0]:
        raise ValueError(
            f"query position {query_pos} out of range for {Z.shape[0]} tokens; fix: lower query_positions or raise "
            f"max_tokens"
        )
    if bool(arrays["causal"]):
        return Z[:query_pos + 1], query_pos
    return Z, query_pos


def head_problem(arrays: dict, spec: np.ndarray, query_positions, unit: Unit) -> HeadProblem:
    H = arrays["W_Q"].shape[0]
    if not 0 <= unit.head < H:
        raise ValueError(f"head {unit.head} out of range, the layer has {H} heads; fix: use 0..{H - 1}")
    qi = list(int(q) for q in query_positions).index(unit.query_pos)
    Z0, qidx = attended(arrays, unit.prompt, unit.query_pos)
    h = unit.head
    return HeadProblem(arrays["W_Q"][h], arrays["W_K"][h], arrays["W_V"][h], arrays["b_Q"][h],
                       arrays["b_K"][h], arrays["b_V"][h], Z0, qidx, spec[h, unit.prompt, qi],
                       unit.radius, unit.norm, unit.mode, meta=unit.key())


def load_unit(
    model: str,
    layer: int,
    head: int,
    prompt: int,
    query_pos: int,
    radius: float,
    norm: str = "linf",
    mode: str = "fixed",
    root: str | Path = "data",
    stage: str = "certify",
) -> HeadProblem:
    """The complete problem of one unit, rebuilt from the files on disk alone.

    Example::

        from attncert.head.units import load_unit
        p = load_unit("all-MiniLM-L6-v2", layer=3, head=5, prompt=0, query_pos=4, radius=0.002)
        p.W_Q, p.Z0, p.query_index, p.c, p.radius, p.norm, p.mode
    """
    root = Path(root)
    arrays = load_layer(root / "extract" / model / f"layer{layer}.npz")
    spec, qps = load_specification(root / stage / model / f"layer{layer}_spec.npz")
    return head_problem(arrays, spec, qps, Unit(layer, head, prompt, query_pos, float(radius), norm, mode))
