"""The second-order certificate of one head: a sound bound on max g (or min g), either query mode.

`second_order_certificate` dispatches on `problem.mode` to the fixed-query relaxation (`monolithic`; above
SEPARABLE_ABOVE attended keys `separable`, the same relaxation at a cost linear in the number of keys) or the
varying-query one (`factored`; above VARYING_LONG_ABOVE tokens `varying_query.long`); sense "min" bounds
min g = -max(-g) with the negated specification.

Fixed query, tight variant: the tight relaxation ((C0)-(C5)) is a subset of the paper-like one ((C0)-(C4)), so
every sound bound of the paper-like relaxation is also a sound bound of the tight one's optimum (and of max g).
Solves end at different points, and the tight solve can end looser (the upper cone (C5) is ill-conditioned at
small half-widths, and the long-context duals are interpolated). `fixed_query_certificate` therefore returns
the smaller of the two bounds for the tight variant, on both paths. The paper-like solve of a unit
(`paper_like_solve`: its result and its kept certificate) can be passed to the tight call by a caller that
certifies both variants, so that it is solved once; its kept dual is offered again to the caller's dual record,
so the certificate stored with a tight number is the dual that proves it.

The unit's reduced geometry (`head.reduced_geometry`) is computed once here, or passed in by the caller, and
handed down to every solve.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from attncert.certify.second_order.attained import first_order_attained
from attncert.certify.second_order.dual_bound.solve_ladder import SOLVER_LADDER
from attncert.certify.second_order.dual_bound.dual_record import DualCertificate, offer_kept, recording_duals
from attncert.certify.second_order.fixed_query.monolithic import second_order_fixed
from attncert.certify.second_order.relaxation.rows import MONOTONE_POINTS, SecondOrderResult
from attncert.certify.second_order.fixed_query.separable import second_order_separable
from attncert.certify.second_order.fixed_query.token_family import FAMILY_ABOVE
from attncert.certify.second_order.varying_query.factored import second_order_varying_factored
from attncert.certify.second_order.varying_query.long import second_order_varying_long
from attncert.head.problem import HeadProblem
from attncert.head.reduced_geometry import ReducedGeometry, reduced_geometry

SEPARABLE_ABOVE = FAMILY_ABOVE  # fixed query: more attended keys than this use `separable`
# varying query: more attended tokens than this use `varying_query.long` (the same factored relaxation, linked through
# d_h, assembled without cvxpy: at n = 64 0.45 s against 8 s, the same gap to 1%; at n = 16 the cvxpy program is
# 2% tighter, bench/results/context_length.md)
VARYING_LONG_ABOVE = 16


@dataclass(frozen=True)
class PaperLike:
    """The paper-like fixed-query solve of one unit (before any relabelling) and its kept certificate."""

    settings: tuple  # (path, monotone points, ladder) it was solved with
    result: SecondOrderResult
    kept: DualCertificate | None


def _path(problem: HeadProblem, path: str | None) -> str:
    path = path or ("separable" if problem.n > SEPARABLE_ABOVE else "fixed")
    if path not in ("fixed", "separable"):
        raise ValueError(f"path must be 'fixed' or 'separable'; got {path!r}")
    return path


def _solve_fixed(problem: HeadProblem, geo: ReducedGeometry, path: str, tight: bool, monotone_points: int,
                 ladder) -> SecondOrderResult:
    if path == "separable":
        return second_order_separable(problem, geo, upper_cone=tight, monotone_points=monotone_points)
    return second_order_fixed(problem, geo, upper_cone=tight, monotone_points=monotone_points,
                              ladder=ladder or SOLVER_LADDER)


def paper_like_solve(problem: HeadProblem, monotone_points: int = MONOTONE_POINTS, ladder=None,
                     path: str | None = None, geometry: ReducedGeometry | None = None) -> PaperLike:
    """The paper-like relaxation of a fixed-query unit, solved with its own dual record (`fixed_query_certificate`
    takes it as `paper_like`)."""
    return _paper_like(problem, reduced_geometry(problem, geometry), _path(problem, path), monotone_points, ladder)


def _paper_like(problem: HeadProblem, geo: ReducedGeometry, path: str, monotone_points: int, ladder) -> PaperLike:
    with recording_duals() as rec:
        res = _solve_fixed(problem, geo, path, False, monotone_points, ladder)
    return PaperLike((path, monotone_points, ladder), res, rec.best)


def fixed_query_certificate(problem: HeadProblem, upper_cone: bool = False, monotone_points: int = MONOTONE_POINTS,
                            ladder=None, path: str | None = None, geometry: ReducedGeometry | None = None,
                            paper_like: PaperLike | None = None) -> SecondOrderResult:
    """Sound upper bound on max g, fixed query, from `monolithic` (path "fixed") or `separable` (path "separable");
    None: `separable` above SEPARABLE_ABOVE attended keys. The tight variant returns the smaller of its bound and
    the paper-like bound (module docstring). paper_like: this unit's `paper_like_solve` with the same settings,
    if the caller has it (solved here otherwise)."""
    return _fixed_query(problem, reduced_geometry(problem, geometry), upper_cone, monotone_points, ladder,
                        _path(problem, path), paper_like)


def _fixed_query(problem: HeadProblem, geo: ReducedGeometry, upper_cone: bool, monotone_points: int, ladder,
                 path: str, paper_like: PaperLike | None) -> SecondOrderResult:
    computed = paper_like is None
    if computed:
        paper_like = _paper_like(problem, geo, path, monotone_points, ladder)
    elif paper_like.settings != (path, monotone_points, ladder):
        raise ValueError(f"paper_like was solved with (path, monotone points, ladder) {paper_like.settings}, not "
                         f"{(path, monotone_points, ladder)}: pass the paper_like_solve of these settings")
    offer_kept(paper_like.kept)
    paper = replace(paper_like.result, log=list(paper_like.result.log))
    if not upper_cone:
        return paper
    tight = _solve_fixed(problem, geo, path, True, monotone_points, ladder)
    if paper.value < tight.value:  # the paper-like bound is also a bound of the tight relaxation
        paper.status += "; tight variant: the paper-like bound is smaller"
        paper.seconds = tight.seconds + (paper.seconds if computed else 0.0)
        return paper
    if computed:
        tight.seconds += paper.seconds
    return tight


def second_order_certificate(problem: HeadProblem, sense: str = "max", upper_cone: bool = False,
                             monotone_points: int = MONOTONE_POINTS, ladder=None,
                             geometry: ReducedGeometry | None = None,
                             paper_like: PaperLike | None = None) -> SecondOrderResult:
    """Sound bound from the second-order (exponential-cone moment) relaxation.

    sense "max": upper bound on max g; "min": lower bound on min g (= -bound for the negated spec).
    upper_cone=True adds the exact upper exponential bound (the tight variant). `ladder`: the solver
    attempts, in order (None: `solve_ladder.SOLVER_LADDER`; the factored varying program's own
    `FACTORED_LADDER`). The varying query uses the factored program (`varying_query.factored`, above
    VARYING_LONG_ABOVE tokens `varying_query.long`). A fallback whose first-order bound a feasible value attains is
    relabelled (`attained`: same value, not a fallback). geometry: `reduced_geometry(problem)` and paper_like:
    `paper_like_solve(problem)` (fixed query), if the caller has them (sense "max" only).
    """
    if sense == "min":
        if geometry is not None or paper_like is not None:
            raise ValueError("geometry and paper_like are the maximised problem's: pass them with sense='max' only")
        r = second_order_certificate(problem.negated(), "max", upper_cone, monotone_points, ladder)
        r.value = -r.value
        r.primal = -r.primal
        r.sense = "min"
        r.log = [(s, st, -b, t) for (s, st, b, t) in r.log]
        return r
    if sense != "max":
        raise ValueError(f"sense must be 'max' or 'min'; got {sense!r}")
    geo = reduced_geometry(problem, geometry)
    if problem.mode == "fixed":
        res = _fixed_query(problem, geo, upper_cone, monotone_points, ladder, _path(problem, None), paper_like)
    elif paper_like is not None:
        raise ValueError("paper_like is a fixed-query solve; this unit's query varies")
    elif problem.n > VARYING_LONG_ABOVE and ladder is None:
        res = second_order_varying_long(problem, geo, upper_cone=upper_cone, monotone_points=monotone_points)
    else:
        res = second_order_varying_factored(problem, geo, monotone_points=monotone_points, ladder=ladder,
                                            upper_cone=upper_cone)
    return first_order_attained(problem, res)
