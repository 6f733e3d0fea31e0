"""The second-order certificate of one head: a sound bound on max g (or min g), either query mode.

`second_order_certificate` dispatches on `problem.mode` to the fixed-query relaxation (`fixed`; above
SEPARABLE_ABOVE attended keys `separable`, the same relaxation at a cost linear in the number of keys) or the
varying-query one (`varying_factored`; above VARYING_LONG_ABOVE tokens `varying_long`); sense "min" bounds
min g = -max(-g) with the negated specification.

Fixed query, tight variant: the tight relaxation ((C0)-(C5)) is a subset of the paper-like one ((C0)-(C4)), so
every sound bound of the paper-like relaxation is also a sound bound of the tight one's optimum (and of max g).
Solves end at different points, and the tight solve can end looser (the upper cone (C5) is ill-conditioned at
small half-widths, and the long-context duals are interpolated). `fixed_query_certificate` therefore returns
the smaller of the two bounds for the tight variant, on both paths; the paper-like result is computed once per
problem object (`HeadProblem.derived`) and its kept dual is offered again to the caller's dual record, so the
certificate stored with a tight number is the dual that proves it.
"""
from __future__ import annotations

from dataclasses import replace

from attncert.certify.second_order.attained import first_order_attained
from attncert.certify.second_order.dual_certificate import SOLVER_LADDER
from attncert.certify.second_order.dual_record import offer_kept, recording_duals
from attncert.certify.second_order.fixed import second_order_fixed
from attncert.certify.second_order.relaxation import MONOTONE_POINTS, SecondOrderResult
from attncert.certify.second_order.separable import second_order_separable
from attncert.certify.second_order.token_family import FAMILY_ABOVE
from attncert.certify.second_order.varying import second_order_varying
from attncert.certify.second_order.varying_factored import second_order_varying_factored
from attncert.certify.second_order.varying_long import second_order_varying_long
from attncert.head.problem import HeadProblem

SEPARABLE_ABOVE = FAMILY_ABOVE  # fixed query: more attended keys than this use `separable`
# varying query: more attended tokens than this use `varying_long` (the same factored relaxation, linked through
# d_h, assembled without cvxpy: at n = 64 0.45 s against 8 s, the same gap to 1%; at n = 16 the cvxpy program is
# 2% tighter, bench/results/context_length.md)
VARYING_LONG_ABOVE = 16


def fixed_query_certificate(problem: HeadProblem, upper_cone: bool = False, monotone_points: int = MONOTONE_POINTS,
                            ladder=None, path: str | None = None) -> SecondOrderResult:
    """Sound upper bound on max g, fixed query, from `fixed` (path "fixed") or `separable` (path "separable");
    None: `separable` above SEPARABLE_ABOVE attended keys. The tight variant returns the smaller of its bound and
    the paper-like bound (module docstring)."""
    path = path or ("separable" if problem.n > SEPARABLE_ABOVE else "fixed")
    if path not in ("fixed", "separable"):
        raise ValueError(f"path must be 'fixed' or 'separable'; got {path!r}")

    def solve(tight: bool) -> SecondOrderResult:
        if path == "separable":
            return second_order_separable(problem, upper_cone=tight, monotone_points=monotone_points)
        return second_order_fixed(problem, upper_cone=tight, monotone_points=monotone_points,
                                  ladder=ladder or SOLVER_LADDER)

    computed = False

    def paper_like():
        nonlocal computed
        computed = True
        with recording_duals() as rec:
            res = solve(False)
        return res, rec.best

    key = ("second_order_paper_like", path, monotone_points, id(ladder) if ladder is not None else None)
    paper, kept = problem.derived(key, paper_like)
    offer_kept(kept)
    paper = replace(paper, log=list(paper.log))
    if not upper_cone:
        return paper
    tight = solve(True)
    if paper.value < tight.value:  # the paper-like bound is also a bound of the tight relaxation
        paper.status += "; tight variant: the paper-like bound is smaller"
        paper.seconds = tight.seconds + (paper.seconds if computed else 0.0)
        return paper
    if computed:
        tight.seconds += paper.seconds
    return tight


def second_order_certificate(problem: HeadProblem, sense: str = "max", upper_cone: bool = False,
                             monotone_points: int = MONOTONE_POINTS, ladder=None,
                             factored: bool = True) -> SecondOrderResult:
    """Sound bound from the second-order (exponential-cone moment) relaxation.

    sense "max": upper bound on max g; "min": lower bound on min g (= -bound for the negated spec).
    upper_cone=True adds the exact upper exponential bound (the tight variant). `ladder`: the solver
    attempts, in order (None: `dual_certificate.SOLVER_LADDER`; the factored varying program's own
    `FACTORED_LADDER`). factored (varying query): the factored
    program of `varying_factored` (default; the unfactored one of `varying` with factored=False). A fallback
    whose first-order bound a feasible value attains is relabelled (`attained`: same value, not a fallback).
    """
    if sense == "min":
        r = second_order_certificate(problem.negated(), "max", upper_cone, monotone_points, ladder, factored)
        r.value = -r.value
        r.primal = -r.primal
        r.sense = "min"
        r.log = [(s, st, -b, t) for (s, st, b, t) in r.log]
        return r
    if sense != "max":
        raise ValueError(f"sense must be 'max' or 'min'; got {sense!r}")
    if problem.mode == "fixed":
        res = fixed_query_certificate(problem, upper_cone, monotone_points, ladder)
    elif problem.mode == "varying" and factored and problem.n > VARYING_LONG_ABOVE and ladder is None:
        res = second_order_varying_long(problem, upper_cone=upper_cone, monotone_points=monotone_points)
    elif problem.mode == "varying" and factored:
        res = second_order_varying_factored(problem, monotone_points=monotone_points, ladder=ladder,
                                            upper_cone=upper_cone)
    else:
        res = second_order_varying(problem, upper_cone=upper_cone, monotone_points=monotone_points,
                                   ladder=ladder or SOLVER_LADDER)
    return first_order_attained(problem, res)
