"""The solve ladder: a cvxpy program solved by a ladder of solver attempts, each certified by weak duality.

`solve_and_certify` runs a ladder of solver attempts, treats each status explicitly and returns the best
certified bound (the minimum of sound bounds is sound).

Solve path: Clarabel runs on cvxpy's data refilled by `compiled.CompiledProgram` (bit for bit what
`get_problem_data` returns, checked when compiled), other solvers through cvxpy.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np

from attncert.certify.second_order.dual_bound.compiled import box_vectors, compiled_program, one_shot, var_offsets
from attncert.certify.second_order.dual_bound.data_error import DATA_REL_ERR
from attncert.certify.second_order.dual_bound.dual_record import offer_dual
from attncert.certify.second_order.dual_bound.free_dual_shift import smaller_bound
from attncert.certify.second_order.dual_bound.weak_duality import (polish_dual, weak_duality_bound)

POLISH_ABOVE = 1e-10  # polish the dual when (bound - primal) exceeds this and ...
POLISH_REL = 1e-3  # ... this x |primal| (an objective whose origin is near the optimum measures the gap)
POLISH_MAX_VARS = 400  # polish only programs this small (the LP of a d = 768 varying query takes ~1 s)
ACCEPT_GAP = 1e-8  # accept a converged solve whose bound is within this x max(1, |primal|) of its primal
LOOSE_RETRIES = 2  # re-solves (next Clarabel rungs) after a converged solve with a looser dual, unless ...
RETRY_REL = 1e-4  # ... its slack is below this x |primal| (the excursion above the objective origin)
# Clarabel on cvxpy's data refilled by `CompiledProgram` (False: cvxpy's get_problem_data per solve)
USE_COMPILED = True
_CLARABEL_BASE = dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10, max_iter=300)
# Attempts in order. Clarabel's exponential-cone line search occasionally stalls at step 0 on these
# thin relaxations with the default max_step_fraction 0.99; 0.9 removed most such failures, the later
# rungs are retries (0.6 without equilibration solved a GPT-2-sized varying unit at r = 0.02 where 0.9,
# 0.75, 0.9 without equilibration, 0.5 and 0.3 stalled). SCS (first order, time-limited) is the last resort.
SOLVER_LADDER = (
    ("CLARABEL", dict(_CLARABEL_BASE, max_step_fraction=0.9)),
    ("CLARABEL", dict(_CLARABEL_BASE, max_step_fraction=0.75)),
    ("CLARABEL", dict(_CLARABEL_BASE, max_step_fraction=0.9, equilibrate_enable=False)),
    ("CLARABEL", dict(_CLARABEL_BASE, max_step_fraction=0.6, equilibrate_enable=False)),
    ("SCS", dict(eps_abs=1e-9, eps_rel=1e-9, max_iters=20_000, time_limit_secs=3.0)),
)

# solver status -> (cvxpy-style status, usable as a converged solve)
_CLARABEL_STATUS = {
    "Solved": ("optimal", True),
    "AlmostSolved": ("optimal_inaccurate", True),
    "PrimalInfeasible": ("infeasible", False),
    "AlmostPrimalInfeasible": ("infeasible_inaccurate", False),
    "DualInfeasible": ("unbounded", False),
    "AlmostDualInfeasible": ("unbounded_inaccurate", False),
    "MaxIterations": ("user_limit", False),
    "MaxTime": ("user_limit", False),
    "NumericalError": ("solver_error", False),
    "InsufficientProgress": ("solver_error", False),
    "CallbackTerminated": ("stalled", False),  # a caller's termination callback ended the solve
}
_SCS_STATUS = {  # SCS 3 info["status_val"]
    1: ("optimal", True),
    2: ("optimal_inaccurate", True),
    -1: ("unbounded", False),
    -6: ("unbounded_inaccurate", False),
    -2: ("infeasible", False),
    -7: ("infeasible_inaccurate", False),
    -3: ("solver_error", False),  # indeterminate
    -4: ("solver_error", False),  # failed
    -5: ("solver_error", False),  # interrupted
}


@dataclass
class CertifiedSolve:
    """Outcome of `solve_and_certify` (objective units of the cvxpy problem)."""

    bound: float  # sound upper bound on max f over box-points satisfying the constraints (inf if none)
    status: str  # status of the solve that produced `bound` (or of the last attempt)
    solver: str
    converged: bool  # some solver reported optimal / optimal_inaccurate
    primal: float  # solver's primal objective (diagnostic only, NOT a bound)
    values: dict = field(default_factory=dict)  # Variable id -> primal value (from the converged solve)
    log: list = field(default_factory=list)  # (solver, status, bound, seconds) of every attempt
    dual_gap: float = math.nan  # bound - primal of the tightest converged attempt (nan if none converged)



# ---------------------------------------------------------------------------------------------
# solving through cvxpy
# ---------------------------------------------------------------------------------------------
def _raw_parts(solver: str, raw):
    """(status, converged, x, z, primal objective) from a raw solver result."""
    if solver == "CLARABEL":
        st, ok = _CLARABEL_STATUS.get(str(raw.status), ("solver_error", False))
        x = None if raw.x is None else np.asarray(raw.x, dtype=np.float64)
        z = None if raw.z is None else np.asarray(raw.z, dtype=np.float64)
        return st, ok, x, z, float(raw.obj_val)
    info = raw["info"]
    st, ok = _SCS_STATUS.get(int(info.get("status_val", -4)), ("solver_error", False))
    return (
        st,
        ok,
        np.asarray(raw["x"], dtype=np.float64),
        np.asarray(raw["y"], dtype=np.float64),
        float(info.get("pobj", np.nan)),
    )


def solve_and_certify(problem: cp.Problem, box: dict, ladder=SOLVER_LADDER, stop_on_success: bool = True,
                      data_rel_err: float = DATA_REL_ERR, accept: float = ACCEPT_GAP,
                      polish: bool = True, loose_retries: int = None) -> CertifiedSolve:
    """Solve the (maximization) cvxpy `problem` and return a sound upper bound on its optimum over `box`.

    box: {Variable: (lo, hi)} for every variable of the problem, arrays of the variable's shape (order as
    cvxpy flattens them, Fortran order). The bound is valid for every point x in the box that satisfies
    the constraints, whatever the solver returns. `ladder` is a sequence of (solver name, options)
    attempts. Each status is mapped explicitly: optimal / optimal_inaccurate count as converged (the
    bound is still computed from the repaired dual, never from the primal objective); any other status
    (infeasible, unbounded -- impossible for a relaxation that contains the true points --, iteration or
    time limit, numerical error, exceptions) is a failure: its last dual iterate still yields a sound,
    possibly loose bound that is kept if it is the best, and the next attempt is run.

    Acceptance. A converged solve is accepted when its certified bound exceeds its own primal objective
    by at most `accept` x max(1, |primal|) (after polishing the dual). A converged solve with a looser dual
    does not stop the ladder: the next interior-point rung re-solves (LOOSE_RETRIES times, and only when the
    slack exceeds RETRY_REL x |primal|, a visible part of the excursion above the objective's origin; the
    slow SCS rung runs only when nothing converged). When no attempt is accepted, the smallest bound is
    still returned (every bound is sound) with the status suffix "_loose_dual"; `dual_gap` always records
    bound - primal, so a loose dual is never accepted silently.
    """
    if not isinstance(problem.objective, cp.Maximize):
        raise ValueError("solve_and_certify expects a maximization problem")
    variables = problem.variables()
    if set(v.id for v in variables) != set(v.id for v in box):
        raise ValueError("box must give bounds for exactly the problem's variables")
    result = CertifiedSolve(bound=math.inf, status="not_run", solver="none", converged=False, primal=math.nan)
    best_ok = None  # (bound, status, solver, primal, values) of the tightest converged attempt
    accepted = False
    loose = 0  # converged attempts with a loose dual so far
    retries = LOOSE_RETRIES if loose_retries is None else loose_retries
    compiled = compiled_program(problem) if USE_COMPILED and any(sv == "CLARABEL" for sv, _ in ladder) else None
    filled = None  # the compiled path's data: the same for every Clarabel rung
    for solver, opts in ladder:
        if best_ok is not None and (loose > retries or solver != "CLARABEL"):
            break  # converged but loose: only LOOSE_RETRIES interior-point re-solves, never the slow SCS
        t0 = time.perf_counter()
        try:
            fast = solver == "CLARABEL" and compiled is not None
            if fast:
                if filled is None:
                    c, A, b = compiled.data()
                    filled = dict(c=c, A=A, b=b, dims=compiled.dims)
                data, offs, nvar = filled, compiled.offsets, compiled.nvar
            else:
                data, chain, inverse_data = problem.get_problem_data(solver, solver_opts={},
                                                                     ignore_dpp=one_shot(problem))
                offs = var_offsets(inverse_data, variables)
                nvar = data["c"].size
            if nvar != sum(v.size for v in variables):
                raise RuntimeError("cvxpy introduced auxiliary variables; the box cannot cover them")
            lo, hi = box_vectors(box, offs, nvar)
            if fast:
                raw = clarabel_solve(compiled, data["c"], data["A"], data["b"], opts)
            else:
                raw = _quiet(lambda: chain.solve_via_data(problem, data, False, False, dict(opts)))
            status, ok, x, z, pobj = _raw_parts(solver, raw)
        except Exception as exc:  # solver crash / interface error: record and try the next solver
            result.log.append((solver, f"solver_error: {type(exc).__name__}: {exc}", math.inf,
                               time.perf_counter() - t0))
            if best_ok is None:
                result.status = "solver_error"
            continue
        bound = math.inf
        if z is not None and z.size:
            try:
                bound, zr = smaller_bound(data["c"], data["A"], data["b"], data["dims"], z, lo, hi,
                                          data_rel_err=data_rel_err)
                offer_dual(bound, data["c"], data["A"], data["b"], data["dims"], lo, hi, zr, data_rel_err)
                slack = bound - (-pobj)
                if (polish and nvar <= POLISH_MAX_VARS and math.isfinite(pobj)
                        and not slack <= max(POLISH_ABOVE, POLISH_REL * abs(pobj))):
                    zp = polish_dual(data["c"], data["A"], data["b"], data["dims"], zr, lo, hi)
                    if zp is not None:
                        bound_p, zpr = weak_duality_bound(data["c"], data["A"], data["b"], data["dims"], zp, lo, hi,
                                                          data_rel_err)
                        offer_dual(bound_p, data["c"], data["A"], data["b"], data["dims"], lo, hi, zpr, data_rel_err)
                        bound = min(bound, bound_p)
            except (ValueError, FloatingPointError, OverflowError):
                bound = math.inf
        usable = ok and math.isfinite(bound) and math.isfinite(pobj)
        tight = usable and bound - (-pobj) <= accept * max(1.0, abs(pobj))
        result.log.append((solver, status if tight or not usable else f"{status}_loose_dual", bound,
                           time.perf_counter() - t0))
        result.bound = min(result.bound, bound)  # every attempt's bound is sound: keep the best
        if usable and (best_ok is None or bound < best_ok[0]):
            vals = {} if x is None else {
                v.id: x[offs[v.id]:offs[v.id] + v.size].reshape(v.shape, order="F") for v in variables}
            best_ok = (bound, status, solver, -pobj, vals, tight)
        elif best_ok is None:
            result.status, result.solver = status, solver
        if tight:
            accepted = True
            if stop_on_success:
                break
        elif usable and bound - (-pobj) <= RETRY_REL * abs(pobj):
            loose = retries + 1  # loose but a negligible part of the excursion: labelled, not re-solved
        elif usable:
            loose += 1  # loose: at most LOOSE_RETRIES more interior-point attempts
    if best_ok is not None:
        bound, status, solver, primal, vals, tight = best_ok
        result.converged = True
        result.status = status if (tight or accepted) else f"{status}_loose_dual"
        result.solver, result.primal, result.values = solver, primal, vals
        result.dual_gap = result.bound - primal
    return result


_SETTINGS: dict = {}  # Clarabel settings per ladder rung (the solver copies them)


def clarabel_solve(compiled, c, A, b, opts: dict):
    """Clarabel on (c, A, b) with cvxpy's cones and settings (verbose off, then `opts`): its raw result."""
    import clarabel

    if getattr(compiled, "cones", None) is None:
        from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import dims_to_solver_cones

        compiled.cones = dims_to_solver_cones(compiled.dims)
    key = tuple(sorted(opts.items()))
    settings = _SETTINGS.get(key)
    if settings is None:
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        for name, val in opts.items():
            setattr(settings, name, val)
        _SETTINGS[key] = settings
    return clarabel.DefaultSolver(compiled.P, c, A, b, compiled.cones, settings).solve()


def _quiet(fn):
    """Run fn with the C-level stdout/stderr silenced (SCS prints allocation errors there)."""
    import os
    import sys

    try:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
    except (OSError, ValueError):
        return fn()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        return fn()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in saved + [devnull]:
            os.close(f)
