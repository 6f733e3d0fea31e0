"""The second-order certificate of one head: a sound bound on max g (or min g), either query mode.

`second_order_certificate` dispatches on `problem.mode` to the fixed-query relaxation (`fixed`; above
SEPARABLE_ABOVE attended keys `separable`, the same relaxation at a cost linear in the number of keys) or the
varying-query one (`varying`); sense "min" bounds min g = -max(-g) with the negated specification.
"""
from __future__ import annotations

from attncert.certify.second_order.attained import first_order_attained
from attncert.certify.second_order.dual_certificate import SOLVER_LADDER
from attncert.certify.second_order.fixed import second_order_fixed
from attncert.certify.second_order.relaxation import MONOTONE_POINTS, SecondOrderResult
from attncert.certify.second_order.separable import second_order_separable
from attncert.certify.second_order.token_family import FAMILY_ABOVE
from attncert.certify.second_order.varying import second_order_varying
from attncert.certify.second_order.varying_factored import second_order_varying_factored
from attncert.head.problem import HeadProblem

SEPARABLE_ABOVE = FAMILY_ABOVE  # fixed query: more attended keys than this use `separable`


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
    if problem.mode == "fixed" and problem.n > SEPARABLE_ABOVE:
        res = second_order_separable(problem, upper_cone=upper_cone, monotone_points=monotone_points)
    elif problem.mode == "varying" and factored:
        res = second_order_varying_factored(problem, monotone_points=monotone_points, ladder=ladder,
                                            upper_cone=upper_cone)
    else:
        solve = second_order_varying if problem.mode == "varying" else second_order_fixed
        res = solve(problem, upper_cone=upper_cone, monotone_points=monotone_points, ladder=ladder or SOLVER_LADDER)
    return first_order_attained(problem, res)
