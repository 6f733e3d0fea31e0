"""Second-order certificate, fixed query, at a cost linear in the number of keys n.

The relaxation is the one of `rows` ((C0)-(C4), and (C5) for the tight variant), in the same units and
with the same coefficients. It differs from `monolithic` in three ways:

1. the program is conic data assembled per token (`token_program`), no cvxpy compile per shape;
2. the bound comes from the exact support function of P per token (`support_bound`), sound for any dual
   vector: the facets given to the solver decide only how tight it is;
3. above FAMILY_ABOVE kept tokens, the duals come from a one-parameter family of token programs
   (`token_family`): two solves of about 100 token programs whatever n.

Facets for the solve (linf): per token the `near` consecutive edges on each side of the vertex of its estimated
optimum (`facets.vertex_dinkelbach`) and a global sigma grid; after a solve, tokens whose atoms U/lam, V/(tau-lam)
lie above the boundary of P get the edges under them (cutting planes, at most `rounds` solves; every round's
bound is sound, the smallest is kept). Each solve's dual is also refined by the outer-approximation LPs of
`token_solve.refined_solutions` (supporting cuts of the cones, HiGHS; in the token family only where the
interior-point dual is inexact, `token_family._refines`); every LP's dual is bounded as well.

Few kept tokens (at most JOINT_MAX) and a wide weight band (R_s >= JOINT_RS), a family solve whose interior-point
rungs all failed, or a family that fell back: the joint token program's bound (the path below FAMILY_ABOVE) is
computed as well and the smaller kept; neither is the tighter one on every unit at weight bands near e^14, and the
joint solve costs a fraction of the family's there.

A solve whose interior-point rungs all fail still gives its last dual iterate (`token_solve.solve_program`):
bounded like any dual, and the start of the refining LPs, whose point then gives the family's values.

Rescue: where the token family falls back to the first-order bound (weight bands near e^14 and beyond, where the
root of the family's normalization equation lies below the token solves' accuracy) and at most RESCUE_MAX tokens
are kept, the monolithic program of `monolithic` is solved on the unit and the smaller bound returned.

Cost (fixed query; measured growth in `bench/context_length.py`): up to FAMILY_ABOVE keys one solve of the whole
program, O(n K) per interior-point iteration; above, O(G) solves plus O(n d) for the bound.
"""
from __future__ import annotations

import math
import time

import numpy as np

from attncert.certify.second_order.relaxation.cutting_planes import vertex_dinkelbach
from attncert.certify.second_order.dual_bound.dual_record import note_construction
from attncert.certify.second_order.relaxation.facets import unit_rows
from attncert.certify.second_order.fixed_query.monolithic import _to_g, prepared_data, second_order_fixed
from attncert.certify.second_order.relaxation.rows import MONOTONE_POINTS, SecondOrderResult, ellipse_matrix, settle
from attncert.certify.second_order.fixed_query.support_bound import bound_from_dual, unit_generators
from attncert.certify.second_order.fixed_query.token_family import FAMILY_ABOVE, family_bound
from attncert.certify.second_order.fixed_query.token_program import build_program
from attncert.certify.second_order.fixed_query.token_solve import (
    GRID,
    LADDER,
    NEAR,
    ROUNDS,
    cutting_plane_rounds,
    edge_window,
    refined_duals,
    solve_program,
)
from attncert.head.reduced_geometry import ReducedGeometry
from attncert.head.rounding import gamma


RESCUE_MAX = 128  # kept tokens at most for the monolithic rescue of a family that fell back
JOINT_MAX = 128  # kept tokens at most for which the joint token program is solved beside the family, ...
JOINT_RS = 3.0  # ... when the score half-width is at least this (band e^6), a family solve failed or it fell back


def _bound_and_log(prog, z, gens, norm, solve_log):
    """The certified bound from the dual z of one solve or its refined versions (inf without one), and its log
    [(solver, status, bound, seconds)] with the bound on the converged attempt."""
    bound = math.inf
    if z is not None:
        for zz in [z] + refined_duals(prog, z):
            bound = min(bound, bound_from_dual(prog, zz, gens, norm)[0])
    log = [(s, st, math.nan, sec) for s, st, sec in solve_log]
    if log:
        log[-1] = log[-1][:2] + (bound, log[-1][3])
    return bound, log


def _linf_rows(geo, D):
    """(chain, hs, hw, hb): every facet of the upper boundary of P in unit coordinates (rows 0, 1: the sigma
    bounds), each a valid half-plane of P whatever the rounding (`facets.unit_rows`)."""
    chain = geo.image
    H_all = np.stack([-chain.domega, chain.dsigma], axis=1)  # outward normals of the upper edges
    nrm = np.hypot(H_all[:, 0], H_all[:, 1])
    H_all = np.where(nrm[:, None] > 0, H_all / np.where(nrm > 0, nrm, 1.0)[:, None], np.array([0.0, 1.0]))
    b_all = D.radius * np.abs(H_all @ np.stack([D.u_s, D.u_w])).sum(axis=1) * (1.0 + gamma(D.u_s.size + 6))
    H = np.concatenate([np.array([[1.0, 0.0], [-1.0, 0.0]]), H_all])
    bb = np.concatenate([[D.R_s, D.R_s], b_all + 1e-300])
    hs_hw, hb = unit_rows(H, bb, D.R_s, D.rho_w)
    return chain, hs_hw[:, 0], hs_hw[:, 1], hb


def second_order_separable(
    problem,
    geo: ReducedGeometry,
    upper_cone: bool = False,
    monotone_points: int = MONOTONE_POINTS,
    ladder=LADDER,
    near: int = NEAR,
    grid: int = GRID,
    rounds: int = ROUNDS,
    family_above: int = FAMILY_ABOVE,
) -> SecondOrderResult:
    """Sound upper bound on max g for a fixed query (mode "fixed"); see the module docstring. family_above: more
    kept tokens than this take their duals from the token family (0: always; benchmarks compare the two).
    geo: `reduced_geometry(problem)`."""
    t0 = time.perf_counter()
    fo, D, early = prepared_data(problem, geo, t0)
    if early is not None:
        return early
    # what every bound below is certified from: the token program of D (`dual_record.SupportCertificate`)
    note_construction(reset=True, path="support", key=(D.A.size, problem.norm, upper_cone, monotone_points), data=D)
    gens = unit_generators(D, problem.norm)
    log, best, best_status, primal, n_rounds, n_facets = [], math.inf, "not_run", math.nan, 0, 0
    if D.A.size > family_above:
        if problem.norm == "l2":
            rows_of_p = ellipse_matrix(D.u_s, D.u_w, D.radius, D.R_s, D.rho_w)
        else:
            rows_of_p = _linf_rows(geo, D)
        ceiling = (fo - D.g0 - D.tail) / D.rho_o if math.isfinite(fo) else math.inf
        best, best_status, t, log = family_bound(D, upper_cone, monotone_points, rows_of_p, gens, problem.norm,
                                                  ladder, near, grid, rounds, ceiling)
        val = _to_g(best, D)
        log = [(s, st, math.nan, sec) for (s, st, sec) in log]
        res = settle(val, fo, t0, "fixed", status=best_status, solver="CLARABEL" if math.isfinite(val) else "none",
                     primal=_to_g(t, D) if math.isfinite(t) else math.nan, rounds=2, log=log)
        failed = any(str(st).startswith("solver_error") for _, st, *_ in log)
        if D.A.size <= JOINT_MAX and (res.fallback or failed or D.R_s >= JOINT_RS):
            # few kept tokens at a wide weight band (or a family solve whose rungs failed): the joint token program
            # (one solve, tau shared) as well, the smaller bound kept; at weight bands near e^14 either can be the
            # tighter one (each by up to 2x on the regime units)
            joint = second_order_separable(problem, geo, upper_cone, monotone_points, ladder, near, grid, rounds,
                                           family_above=D.A.size)
            if joint.value < res.value:
                joint.status += "; long-context path: the joint token program, smaller than the family's"
                joint.seconds += res.seconds
                res = joint
            else:
                res.seconds += joint.seconds
        if res.fallback and D.A.size <= RESCUE_MAX:
            # weight bands near e^14 and beyond: the family's root is below the token solves' accuracy; the
            # monolithic program of `monolithic` on these few kept tokens is the rescue (its bound is sound as well)
            mono = second_order_fixed(problem, geo, upper_cone, monotone_points)
            if mono.value < res.value:
                mono.status += "; long-context path: the token family fell back, monolithic program"
                mono.seconds += res.seconds
                return mono
        return res
    if problem.norm == "l2":
        prog = build_program(D, upper_cone, monotone_points, None, None, None, None,
                             ellipse=ellipse_matrix(D.u_s, D.u_w, D.radius, D.R_s, D.rho_w))
        best_status, primal, _, z, lg = solve_program(prog, ladder, iterate=True)
        best, log = _bound_and_log(prog, z, gens, "l2", lg)
        n_rounds = 1
    else:
        chain, hs, hw, hb = _linf_rows(geo, D)
        n = D.A.size
        _, kv = vertex_dinkelbach(D.A, D.w0, D.g0, np.tile(chain.sigma, (n, 1)), np.tile(chain.omega, (n, 1)))
        edges = edge_window(kv, chain, near, grid)
        for prog, n_facets, status, p, x, z, lg in cutting_plane_rounds(D, upper_cone, monotone_points, edges,
                                                                        (hs, hw, hb), chain, ladder, rounds,
                                                                        iterate=True):
            bound, lg = _bound_and_log(prog, z, gens, "linf", lg)
            log += lg
            n_rounds += 1
            if bound < best:
                best, best_status = bound, status
            if x is not None:
                primal = p
    val = _to_g(best, D)
    gap = val - _to_g(primal, D) if math.isfinite(primal) else math.nan
    log = [(s, st, _to_g(b, D), sec) for (s, st, b, sec) in log]
    return settle(val, fo, t0, "fixed", status=best_status, solver="CLARABEL" if math.isfinite(val) else "none",
                  primal=_to_g(primal, D) if math.isfinite(primal) else math.nan, rounds=n_rounds, n_facets=n_facets,
                  log=log, dual_gap=gap)
