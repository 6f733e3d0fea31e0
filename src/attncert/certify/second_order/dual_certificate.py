"""Sound upper bounds from a solved conic program: weak duality with a variable box and outward rounding.

Problem. cvxpy canonicalizes a problem ``maximize f(x) s.t. constraints`` (f linear, constraints affine
in conic form, no auxiliary variables) into

    minimize  c^T x    s.t.   A x + s = b,   s in K = {0}^{m_0} x R_+^{m_1} x SOC x ... x K_exp x ...,

with f(x) = -c^T x. The solver (Clarabel, or SCS as fallback) returns a dual vector z. We never use the
solver's primal objective as the answer. Instead, for a box X = [lo, hi] that contains every point we
must cover (the lifted true perturbations; it is *not* a constraint of the program), and for any z in
the dual cone K^*,

    f(x) = -c^T x  <=  -c^T x + z^T (b - A x)  =  z^T b - (c + A^T z)^T x
                   <=  z^T b + sum_i max( g_i lo_i, g_i hi_i ),        g = -(c + A^T z),      (WD)

because z^T s >= 0 for s in K, z in K^*. The right-hand side is finite for *every* z in K^* (the box
absorbs the stationarity residual g, which the solver drives to ~1e-9), so the bound is valid whatever
the solver's accuracy or status; the solver only decides how tight it is.

Dual repair. The solver's z is moved into K^* exactly: zero cone -- free; R_+ -- clip at 0;
SOC (t, y) -- t >= ||y||; exponential cone (cvxpy/Clarabel/SCS convention
K_exp = cl{(x, y, z) : y > 0, y e^{x/y} <= z}, dual K_exp^* = cl{(u, v, w) : u < 0, -u e^{v/u} <= e w})
-- either raise w to -u e^{v/u - 1} or raise v to u (1 + log(w / -u)), whichever moves (WD) less;
u >= 0 becomes (0, max(v, 0), max(w, 0)).

Data rounding. The numbers in (A, b, c) are floating-point images of the real relaxation; we assume
each entry has relative error at most `data_rel_err` (default 1e-12: a few dozen roundings of derived
quantities). A true point then satisfies b - A x in K up to |Delta_k| <= e_k = data_rel_err (|A_k| m + |b_k|)
per row (m_i = max(|lo_i|, |hi_i|)), and its objective is off by at most data_rel_err |c|^T m; both are
added to (WD) as sum_k |z_k| e_k + data_rel_err |c|^T m.

Outward rounding of (WD) itself: g_i is computed with error at most gamma_{k_i + 2} (|c_i| + (|A|^T |z|)_i)
(k_i = entries in column i); every product and sum is bounded the same way; all error terms are added,
doubled, and the result is stepped up by a few ulps.

Dual polishing (`polish_dual`). For small programs whose bound exceeds the solver's primal value, each
cone block k is replaced by its supporting cut z_k^T (b_k - A_k x) >= 0 and the resulting LP over the box is
solved with HiGHS; its multipliers (mu_k >= 0 on a cut gives the cone dual mu_k z_k) are again a point of
K^*, evaluated by (WD) like any other dual. The smaller bound is kept.

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
import scipy.sparse as sp

from attncert.certify.second_order.compiled import DATA_REL_ERR, box_vectors, compiled_program, var_offsets
from attncert.certify.second_order.dual_record import offer_dual
from attncert.head.rounding import UNIT_ROUNDOFF, round_up

POLISH_ABOVE = 1e-10  # polish the dual when (bound - primal) exceeds this and ...
POLISH_REL = 1e-3  # ... this x |primal| (an objective whose origin is near the optimum measures the gap)
POLISH_SECONDS = 1.0  # time limit of the polishing LP
POLISH_MAX_VARS = 400  # polish only programs this small (the LP of a d = 768 varying query takes ~1 s)
ACCEPT_GAP = 1e-8  # accept a converged solve whose bound is within this x max(1, |primal|) of its primal
LOOSE_RETRIES = 2  # re-solves (next Clarabel rungs) after a converged solve with a looser dual, unless ...
RETRY_REL = 1e-4  # ... its slack is below this x |primal| (the excursion above the objective origin)
USE_COMPILED = True  # Clarabel on cvxpy's data refilled by `CompiledProgram` (False: cvxpy's get_problem_data per solve)
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
# dual cone repair
# ---------------------------------------------------------------------------------------------
def _cone_slices(dims):
    """Row ranges of the cones in the canonical data, in the order cvxpy writes them."""
    if dims.psd or dims.p3d or getattr(dims, "pnd", []):
        raise NotImplementedError("only zero, nonnegative, second-order and exponential cones are certified")
    out = []
    k = 0
    if dims.zero:
        out.append(("zero", k, k + dims.zero))
        k += dims.zero
    if dims.nonneg:
        out.append(("nonneg", k, k + dims.nonneg))
        k += dims.nonneg
    for q in dims.soc:
        out.append(("soc", k, k + q))
        k += q
    for _ in range(dims.exp):
        out.append(("exp", k, k + 3))
        k += 3
    return out, k


def repair_dual(z: np.ndarray, dims, row_cost: np.ndarray) -> np.ndarray:
    """Return a copy of z that lies exactly in K^* (see module docstring).

    row_cost[k] >= |d bound / d z_k| is used to choose the cheaper repair of an exponential cone.
    """
    z = np.array(z, dtype=np.float64, copy=True)
    z[~np.isfinite(z)] = 0.0
    slices, m = _cone_slices(dims)
    if m != z.size:
        raise ValueError(f"dual vector has {z.size} rows, cones need {m}")
    for kind, a, b in slices:
        if kind == "nonneg":
            np.maximum(z[a:b], 0.0, out=z[a:b])
        elif kind == "soc":
            nrm = float(np.linalg.norm(z[a + 1:b]))
            need = round_up(nrm * (1.0 + 4.0 * UNIT_ROUNDOFF * (b - a)) + 1e-300)
            if z[a] < need:
                z[a] = need
        elif kind == "exp":
            u, v, w = z[a], z[a + 1], z[a + 2]
            if not u < 0.0:
                z[a], z[a + 1], z[a + 2] = 0.0, max(v, 0.0), max(w, 0.0)
                continue
            # exact requirement: w >= -u exp(v/u - 1); checked with a 1e-13 relative margin
            ex = v / u - 1.0
            w_req = -u * math.exp(ex) * (1.0 + 1e-13) + 1e-300 if ex < 700 else math.inf
            if w >= w_req:
                continue
            cost_w = (w_req - w) * row_cost[a + 2]
            ratio = w / -u
            if w > 0.0 and 0.0 < ratio < math.inf:  # the ratio can underflow to 0 or overflow: no v repair then
                v_req = u * (1.0 + math.log(ratio))
                v_req = v_req + 1e-13 * abs(v_req) + 1e-13 * abs(u) + 1e-300
                cost_v = (v_req - v) * row_cost[a + 1] if math.isfinite(v_req) else math.inf
            else:
                cost_v = math.inf
            if cost_v < cost_w:
                z[a + 1] = v_req
            elif math.isfinite(w_req):
                z[a + 2] = w_req
            else:  # hopeless cone dual: drop it
                z[a], z[a + 1], z[a + 2] = 0.0, 0.0, 0.0
    return z


# ---------------------------------------------------------------------------------------------
# weak duality bound with outward rounding
# ---------------------------------------------------------------------------------------------
def weak_duality_bound(c: np.ndarray, A: sp.spmatrix, b: np.ndarray, dims, z: np.ndarray,
                       lo: np.ndarray, hi: np.ndarray, data_rel_err: float = DATA_REL_ERR) -> tuple[float, np.ndarray]:
    """Sound upper bound on max_{x in [lo, hi], b - A x in K} -c^T x from any z (repaired into K^*).

    Returns (bound, repaired z).
    """
    A = A if sp.issparse(A) and A.format == "csc" else sp.csc_matrix(A)
    c = np.asarray(c, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo <= hi)):
        raise ValueError("the certification box must be finite with lo <= hi")
    mag = np.maximum(np.abs(lo), np.abs(hi))
    absA = abs(A)
    row_cost = absA @ mag + np.abs(b)
    zr = repair_dual(z, dims, row_cost * (1.0 + data_rel_err) + 1e-300)

    g = -(c + A.T @ zr)
    col_nnz = np.diff(A.indptr)
    ku = (col_nnz + 3) * UNIT_ROUNDOFF
    g_err = ku / (1.0 - ku) * (np.abs(c) + absA.T @ np.abs(zr))
    best = np.maximum(g * lo, g * hi)  # each product correctly rounded: relative error <= u
    main = math.fsum(best.tolist()) + math.fsum((zr * b).tolist())
    err = (g_err @ mag) * (1.0 + 1e-10)
    err += 2.0 * UNIT_ROUNDOFF * (float(np.abs(best).sum()) + float(np.abs(zr * b).sum()))
    err += 2.0 * np.spacing(abs(main))
    # data rounding of the program itself
    err += data_rel_err * (float(np.abs(zr) @ row_cost) + float(np.abs(c) @ mag))
    total = main + 2.0 * err + 1e-300
    if not math.isfinite(total):
        return math.inf, zr
    return round_up(total), zr


def polish_dual(c: np.ndarray, A: sp.spmatrix, b: np.ndarray, dims, z: np.ndarray, lo: np.ndarray,
                hi: np.ndarray) -> np.ndarray | None:
    """A better dual from a linear program, given the solver's (repaired) cone duals.

    Every block k of a second-order or exponential cone with dual z_k in K_k^* gives the valid linear cut
    z_k^T (b_k - A_k x) >= 0 (a supporting half-space of the cone). The LP

        minimize c^T x   s.t.  zero-cone rows,  nonnegative rows,  one cut per cone block,  lo <= x <= hi

    is a relaxation of the conic program over the box (which contains every point we must cover), so its
    dual -- equality and row multipliers, and a multiplier mu_k >= 0 per cut, i.e. the cone dual mu_k z_k
    -- is again a point of K^*. It is solved with HiGHS (simplex accuracy); when the interior-point dual
    is slightly off, the cuts still pass within second order of the optimum, whereas (WD) with the raw dual
    pays the stationarity residual to first order. Returns the assembled dual vector, or None.
    """
    from scipy.optimize import linprog

    A = sp.csr_matrix(A)
    slices, m = _cone_slices(dims)
    eq_rows, ub_rows, cut_blocks = [], [], []
    for kind, a, bnd in slices:
        if kind == "zero":
            eq_rows.extend(range(a, bnd))
        elif kind == "nonneg":
            ub_rows.extend(range(a, bnd))
        else:
            cut_blocks.append((a, bnd))
    # rows: A x <= b for nonnegative rows; cuts: (z_k^T A_k) x <= z_k^T b_k, all blocks at once
    if cut_blocks:
        rows = np.concatenate([np.arange(a, e) for a, e in cut_blocks])
        blk = np.concatenate([np.full(e - a, k) for k, (a, e) in enumerate(cut_blocks)])
        Zsel = sp.csr_matrix((z[rows], (blk, rows)), shape=(len(cut_blocks), m))
        cut_A = [Zsel @ A]
        cut_b = [Zsel @ b]
    else:
        cut_A, cut_b = [], []
    A_ub = sp.vstack([A[ub_rows]] + cut_A, format="csr") if (ub_rows or cut_A) else None
    b_ub = np.concatenate([b[ub_rows]] + cut_b) if A_ub is not None else None
    A_eq = A[eq_rows] if eq_rows else None
    b_eq = b[eq_rows] if eq_rows else None
    try:
        res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=np.stack([lo, hi], axis=1),
                      method="highs", options=dict(time_limit=POLISH_SECONDS))
    except (ValueError, np.linalg.LinAlgError):
        return None
    if res.status != 0 or res.ineqlin is None:
        return None
    znew = np.zeros(m)
    if eq_rows:
        znew[eq_rows] = -np.asarray(res.eqlin.marginals)
    mu = -np.asarray(res.ineqlin.marginals)
    znew[ub_rows] = mu[:len(ub_rows)]
    for (a, e), mk in zip(cut_blocks, mu[len(ub_rows):]):
        znew[a:e] = max(mk, 0.0) * z[a:e]
    return znew


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
    return st, ok, np.asarray(raw["x"], dtype=np.float64), np.asarray(raw["y"], dtype=np.float64), float(info.get("pobj", np.nan))


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
                data, chain, inverse_data = problem.get_problem_data(solver, solver_opts={})
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
                bound, zr = weak_duality_bound(data["c"], data["A"], data["b"], data["dims"], z, lo, hi, data_rel_err)
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
