"""The second-order certificate of one head: a sound bound on max g (or min g), either query mode.

`second_order_certificate` dispatches on `problem.mode` to the fixed-query relaxation (`monolithic`; above
SEPARABLE_ABOVE attended keys `separable`, the same relaxation at a cost linear in the number of keys) or the
varying-query one (`factored`; above VARYING_LONG_ABOVE tokens `varying_query.long`); sense "min" bounds
min g = -max(-g) with the negated specification.

Tight variant, either query mode: the tight relaxation ((C0)-(C5)) is a subset of the paper-like one ((C0)-(C4)),
so every sound bound of the paper-like relaxation is also a sound bound of the tight one's optimum (and of max g).
Solves end at different points, and the tight solve can end looser (the upper cone (C5) is ill-conditioned at
small half-widths, the long-context duals are interpolated, and on the varying query's long path the tight solve
at small radii stops further from its optimum). The tight variant therefore returns the smaller of the two bounds,
on every path. The paper-like solve of a unit
(`paper_like_solve`: its result and its kept certificate) can be passed to the tight call by a caller that
certifies both variants, so that it is solved once; its kept dual is offered again to the caller's dual record,
so the certificate stored with a tight number is the dual that proves it. On the varying query's long path above
`long.RESUME_ABOVE` tokens the tight solve starts from the paper-like solve's cuts and memo (`long_start`).

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
# varying query: more attended tokens than this use `varying_query.long`, which up to its BESIDE_MAX tokens also solves
# the cvxpy programs of `factored` and keeps the smaller certified bound
VARYING_LONG_ABOVE = 1


@dataclass(frozen=True)
class PaperLike:
    """The paper-like solve of one unit (before any relabelling) and its kept certificate."""

    settings: tuple  # (path, monotone points, ladder) it was solved with
    result: SecondOrderResult
    kept: DualCertificate | None


FIXED_PATHS = ("fixed", "separable")
VARYING_PATHS = ("varying_factored", "varying_long")


def _path(problem: HeadProblem, path: str | None, ladder=None) -> str:
    """The unit's path: fixed query `fixed` (monolithic) or `separable` (above SEPARABLE_ABOVE attended keys);
    varying query `varying_factored` or `varying_long` (above VARYING_LONG_ABOVE tokens, with the default
    ladder: the long path has its own)."""
    if problem.mode == "varying":
        path = path or ("varying_long" if problem.n > VARYING_LONG_ABOVE and ladder is None else "varying_factored")
        valid = VARYING_PATHS
    else:
        path = path or ("separable" if problem.n > SEPARABLE_ABOVE else "fixed")
        valid = FIXED_PATHS
    if path not in valid:
        raise ValueError(f"path for a {problem.mode} query must be one of {valid}; got {path!r}")
    return path


def _solve(problem: HeadProblem, geo: ReducedGeometry, path: str, tight: bool, monotone_points: int,
           ladder, start=None) -> SecondOrderResult:
    if path == "separable":
        return second_order_separable(problem, geo, upper_cone=tight, monotone_points=monotone_points)
    if path == "fixed":
        return second_order_fixed(problem, geo, upper_cone=tight, monotone_points=monotone_points,
                                  ladder=ladder or SOLVER_LADDER)
    if path == "varying_long":
        return second_order_varying_long(problem, geo, upper_cone=tight, monotone_points=monotone_points, start=start)
    return second_order_varying_factored(problem, geo, monotone_points=monotone_points, ladder=ladder,
                                         upper_cone=tight)


def paper_like_solve(problem: HeadProblem, monotone_points: int = MONOTONE_POINTS, ladder=None,
                     path: str | None = None, geometry: ReducedGeometry | None = None) -> PaperLike:
    """The paper-like relaxation of a unit (either query mode), solved with its own dual record
    (`fixed_query_certificate` and `second_order_certificate` take it as `paper_like`)."""
    return _paper_like(problem, reduced_geometry(problem, geometry), _path(problem, path, ladder), monotone_points,
                       ladder)


def _paper_like(problem: HeadProblem, geo: ReducedGeometry, path: str, monotone_points: int, ladder) -> PaperLike:
    with recording_duals() as rec:
        res = _solve(problem, geo, path, False, monotone_points, ladder)
    return PaperLike((path, monotone_points, ladder), res, rec.best)


def fixed_query_certificate(problem: HeadProblem, upper_cone: bool = False, monotone_points: int = MONOTONE_POINTS,
                            ladder=None, path: str | None = None, geometry: ReducedGeometry | None = None,
                            paper_like: PaperLike | None = None) -> SecondOrderResult:
    """Sound upper bound on max g, fixed query, from `monolithic` (path "fixed") or `separable` (path "separable");
    None: `separable` above SEPARABLE_ABOVE attended keys. The tight variant returns the smaller of its bound and
    the paper-like bound (module docstring). paper_like: this unit's `paper_like_solve` with the same settings,
    if the caller has it (solved here otherwise)."""
    if problem.mode != "fixed":
        raise ValueError("fixed_query_certificate expects mode='fixed'; use second_order_certificate")
    return _tight_or_paper_like(problem, reduced_geometry(problem, geometry), upper_cone, monotone_points, ladder,
                                _path(problem, path), paper_like)


def _tight_or_paper_like(problem: HeadProblem, geo: ReducedGeometry, upper_cone: bool, monotone_points: int, ladder,
                         path: str, paper_like: PaperLike | None) -> SecondOrderResult:
    """The paper-like solve, and for the tight variant the smaller of the two certified bounds."""
    computed = paper_like is None
    if computed:
        paper_like = _paper_like(problem, geo, path, monotone_points, ladder)
    elif paper_like.settings != (path, monotone_points, ladder):
        raise ValueError(f"paper_like was solved with (path, monotone points, ladder) {paper_like.settings}, not "
                         f"{(path, monotone_points, ladder)}: pass the paper_like_solve of these settings")
    offer_kept(paper_like.kept)
    # the long path's end state stays in paper_like: the results returned do not carry it (nor its memo)
    paper = replace(paper_like.result, log=list(paper_like.result.log), resume=None)
    if not upper_cone:
        return paper
    tight = _solve(problem, geo, path, True, monotone_points, ladder, start=paper_like.result.resume)
    tight.resume = None
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
    `FACTORED_LADDER`). The varying query above VARYING_LONG_ABOVE tokens solves `varying_query.long`, with the
    cvxpy programs of `varying_query.factored` beside it up to `long.BESIDE_MAX` tokens (the smaller bound kept);
    at or below it the cvxpy programs alone. A fallback whose first-order bound a feasible value attains is
    relabelled (`attained`: same value, not a fallback). The tight variant returns the smaller of its bound and the
    paper-like one (module docstring). geometry: `reduced_geometry(problem)` and paper_like:
    `paper_like_solve(problem)` with the same ladder, if the caller has them (sense "max" only).

    The bound's last digits depend on the BLAS thread count (the solvers' paths can carry that further); the
    pipeline and the `attncert` command run at one thread: set OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and
    MKL_NUM_THREADS to 1 before numpy loads to get their numbers.
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
    res = _tight_or_paper_like(problem, geo, upper_cone, monotone_points, ladder, _path(problem, None, ladder),
                               paper_like)
    return first_order_attained(problem, res)
