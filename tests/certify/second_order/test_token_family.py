"""The token family's shortcuts (`token_family`): facets carried between passes, the quick interior-point rung, the
outer-approximation LPs only where the interior-point dual is inexact, the stop on a Newton step small against the
bound's margin. Each is compared with the full path (every pass cuts afresh, every solve refined, the ladder
alone, the passes' earlier stop rule) on small random heads: sound, and the same certified number up to 1e-4 of
the first-order gap (the duals differ, so the last digits do; measured at most 1.2e-5 on twelve heads)."""
from __future__ import annotations

import numpy as np
import pytest

import attncert.certify.second_order.fixed_query.separable as sep
import attncert.certify.second_order.fixed_query.token_family as tf
from attncert.certify.exact_worst_case import exact_worst_case
from attncert.certify.first_order_certificate import first_order_certificate
from attncert.certify.second_order.fixed_query.monolithic import prepared_data
from attncert.certify.second_order.fixed_query.separable import _linf_rows
from attncert.certify.second_order.fixed_query.token_program import build_program
from attncert.certify.second_order.fixed_query.token_solve import atom_edges, cuts, edge_window, solve_program
from attncert.head.problem import random_head_problem
from attncert.head.reduced_geometry import reduced_geometry

FULL = {"CARRY": False, "QUICK_FIRST": False, "REFINE_OPTIMAL_LINF": True, "FAMILY_SHARE": 0.0}


def _head(seed: int):
    rng = np.random.default_rng(seed)
    return random_head_problem(rng, d=8, d_head=4, n=int(rng.integers(60, 110)), radius=10 ** rng.uniform(-3, -1.3),
                               norm="linf")


def _value(problem, tight: bool, monkeypatch, settings: dict) -> float:
    with monkeypatch.context() as m:
        for name, val in settings.items():
            m.setattr(tf, name, val)
        return sep.second_order_separable(problem, reduced_geometry(problem), upper_cone=tight).value


@pytest.mark.parametrize("shortcut", ["all", *FULL])
@pytest.mark.parametrize("seed,tight", [(1, True), (2, False), (8, False)])
def test_shortcuts_give_the_full_paths_number_and_are_sound(seed, tight, shortcut, monkeypatch):
    """With all shortcuts (or all but one: the full path's setting for every other), the certified number is at or
    above the exact maximum and within 1e-4 of the first-order gap of the full path's."""
    problem = _head(seed)
    _, D, early = prepared_data(problem, reduced_geometry(problem), 0.0)
    assert early is None and D.A.size > tf.FAMILY_ABOVE
    ex = exact_worst_case(problem)
    fo = first_order_certificate(problem)
    settings = {} if shortcut == "all" else {k: v for k, v in FULL.items() if k != shortcut}
    short = _value(problem, tight, monkeypatch, settings)
    full = _value(problem, tight, monkeypatch, FULL)
    tol = 1e-9 * (1.0 + ex.value_spread)
    assert short >= ex.hi - tol and full >= ex.hi - tol
    assert abs(short - full) <= 1e-4 * (fo - ex.hi) + tol


def test_distinct_keeps_each_rows_entries_once():
    rng = np.random.default_rng(0)
    edges = rng.integers(-2, 12, size=(50, 9))
    out = tf._distinct(edges)
    assert out.shape[1] == max(np.unique(r).size for r in edges)
    for row, new in zip(edges, out):
        assert set(new.tolist()) == set(row.tolist())
        k = np.unique(row).size
        assert np.array_equal(new[:k], np.unique(row)) and np.all(new[k:] == new[0])


def test_carried_edges_come_from_the_two_grid_points_around_each_w():
    g_old = np.array([-1.0, 0.0, 2.0])
    atoms = np.array([[3, 5], [7, -2], [11, 13]])
    gw = np.array([-5.0, 0.5, 2.0])
    assert tf._carried(gw, None, 1) is None and tf._carried(gw, (g_old, None), 1) is None
    out = tf._carried(gw, (g_old, atoms), 1)
    assert out.shape == (3, 12)
    assert set(out[1].tolist()) == {6, 7, 8, -2, 10, 11, 12, 13, 14}  # between the grid points 0.0 and 2.0
    assert set(out[0].tolist()) == {2, 3, 4, 5, 6, 7, 8, -2}  # below the grid: its first two points


def test_atom_edges_are_the_cuts_where_the_atoms_lie_above_p():
    """`atom_edges` gives the edge under each atom; where an atom lies above P it is the edge `cuts` adds."""
    problem = _head(2)
    geo = reduced_geometry(problem)
    _, D, _ = prepared_data(problem, geo, 0.0)
    chain, hs, hw, hb = _linf_rows(geo, D)
    edges = edge_window(np.zeros(D.A.size, dtype=np.int64), chain, 1, 3)
    prog = build_program(D, False, 3, edges, hs, hw, hb)
    _, _, x, _, _ = solve_program(prog)
    assert x is not None
    new, _ = cuts(prog, x, D, chain, edges - 2)
    at = atom_edges(prog, x, D, chain)
    cut = new != (edges[:, :1] - 2)
    assert cut.any() and np.array_equal(at[cut], new[cut])
