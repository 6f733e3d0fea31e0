"""The unit grid: specification seeds, attended tokens, and rebuilding a unit from the files on disk."""
import numpy as np
import pytest

from attncert.head.specification import spec_seed, specification_direction
from attncert.head.units import (
    Unit,
    attended,
    grid,
    head_problem,
    load_unit,
    specification_vectors,
    write_specification,
)
from attncert.integrity.intermediate_check import IntermediateError
from attncert.provenance.provenance import write_sidecar


def _arrays(rng, causal: bool, H=2, P=2, T=5, d=4, dh=3):
    return {"W_Q": rng.standard_normal((H, d, dh)), "W_K": rng.standard_normal((H, d, dh)),
            "W_V": rng.standard_normal((H, d, dh)), "b_Q": rng.standard_normal((H, dh)),
            "b_K": rng.standard_normal((H, dh)), "b_V": rng.standard_normal((H, dh)),
            "W_O": rng.standard_normal((H, dh, d)), "Z": rng.standard_normal((P, T, d)), "causal": np.bool_(causal)}


def test_spec_seed_is_deterministic_and_distinct_per_unit():
    seeds = {spec_seed(0, L, h, p, q) for L in range(3) for h in range(3) for p in range(2) for q in (2, 4)}
    assert len(seeds) == 36 and spec_seed(0, 1, 2, 1, 4) == spec_seed(0, 1, 2, 1, 4)
    assert spec_seed(0, 1, 2, 1, 4) != spec_seed(1, 1, 2, 1, 4)


def test_specification_is_a_unit_vector_in_the_range_of_W_O():
    W_O = np.random.default_rng(0).standard_normal((3, 7))
    c = specification_direction(W_O, 5)
    assert np.isclose(np.linalg.norm(c), 1.0) and c.shape == (3,)
    assert np.allclose(c, specification_direction(W_O, 5))


def test_attended_tokens_causal_and_bidirectional():
    rng = np.random.default_rng(1)
    for causal, n in ((True, 3), (False, 5)):
        arr = _arrays(rng, causal)
        Z0, qi = attended(arr, prompt=1, query_pos=2)
        assert Z0.shape[0] == n and qi == 2 and np.array_equal(Z0, arr["Z"][1][:n])
    with pytest.raises(ValueError, match="query position 9 out of range"):
        attended(_arrays(rng, True), 0, 9)


def test_grid_and_head_problem_match_the_unit():
    rng = np.random.default_rng(2)
    arr = _arrays(rng, True)
    spec = specification_vectors(arr, layer=3, query_positions=[2, 4], base_seed=0)
    units = grid([0, 1], [0, 1], [2, 4], [0.01, 0.1], ["linf"], ["fixed", "varying"], layer=3)
    assert len(units) == 2 * 2 * 2 * 2 * 2 and len(set(units)) == len(units)
    u = Unit(3, 1, 1, 4, 0.1, "linf", "varying")
    p = head_problem(arr, spec, [2, 4], u)
    assert p.n == 5 and p.query_index == 4 and p.radius == 0.1 and p.mode == "varying"
    assert np.array_equal(p.W_K, arr["W_K"][1]) and np.array_equal(p.c, spec[1, 1, 1])
    assert p.meta == u.key()
    with pytest.raises(ValueError, match="head 2 out of range"):
        head_problem(arr, spec, [2, 4], Unit(3, 2, 0, 2, 0.1, "linf", "fixed"))


def test_load_unit_rebuilds_the_problem_from_disk(tmp_path):
    rng = np.random.default_rng(3)
    arr = _arrays(rng, False)
    (tmp_path / "extract" / "m").mkdir(parents=True)
    np.savez(tmp_path / "extract" / "m" / "layer1.npz", **arr)
    write_sidecar(tmp_path / "extract" / "m" / "layer1.npz", {"stage": "extract"})
    spec = specification_vectors(arr, 1, [2], base_seed=7)
    write_specification(tmp_path / "certify" / "m" / "layer1_spec.npz", spec, [2], 1, 7)
    p = load_unit("m", layer=1, head=0, prompt=1, query_pos=2, radius=0.05, mode="fixed", root=tmp_path)
    q = head_problem(arr, spec, [2], Unit(1, 0, 1, 2, 0.05, "linf", "fixed"))
    assert p.value(p.Z0) == q.value(q.Z0) and np.array_equal(p.c, q.c)
    with pytest.raises(IntermediateError, match="layer2.npz is missing: regenerate it with: snakemake"):
        load_unit("m", layer=2, head=0, prompt=0, query_pos=2, radius=0.05, root=tmp_path)


def test_varying_sub_grid_keeps_only_those_varying_units():
    full = grid([0, 1], [0], [1, 4], [0.001, 0.002, 0.02], ["linf"], ["fixed", "varying"], layer=2)
    sub = grid([0, 1], [0], [1, 4], [0.001, 0.002, 0.02], ["linf"], ["fixed", "varying"], layer=2,
               varying={"query_positions": [4], "radii": [0.001, 0.002]})
    assert len(full) == 24 and [u for u in full if u.mode == "fixed"] == [u for u in sub if u.mode == "fixed"]
    v = [u for u in sub if u.mode == "varying"]
    assert len(v) == 4 and {u.query_pos for u in v} == {4} and {u.radius for u in v} == {0.001, 0.002}
