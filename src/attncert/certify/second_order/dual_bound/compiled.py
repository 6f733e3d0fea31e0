"""The relaxations' canonical conic data: cvxpy's compiled data refilled from parameter values (no solver here).

The relaxations are parametrized cvxpy problems, built once per shape and solved thousands of times with new
parameter values. cvxpy's `get_problem_data` re-runs its reduction chain on every call (~2 ms on these small
programs, as much as a Clarabel solve); instead, the first solve of a problem compiles it once (`CompiledProgram`:
cvxpy's own parameter-to-data tensors, variable offsets and cone dimensions) and every later solve refills
(c, A, b) with one sparse product and calls Clarabel with the same data, cones and settings cvxpy would pass.
The compiled data are checked bit for bit against `get_problem_data` when compiled (any difference, or a cvxpy
without these internals, keeps cvxpy's path), so every solve and every certified bound is unchanged.

A program marked one-shot (`mark_one_shot`: the varying query's cvxpy programs above
`varying_query.program.ONE_SHOT_ABOVE` tokens, solved once or a few times per unit) is compiled per solve with the
parameters' current values as constants (`get_problem_data(ignore_dpp=True)`, `OneShotProgram`; the same nonzero
entries as the tensor's data, which also store explicit zeros; checked by the tests): cvxpy's parameter-to-data
tensor is what costs at that size (GPT-2-sized head, 64 keys, linf, the factored program: 24.5 s and 2.5 GB with
it, 0.26 s and no measurable memory without). A checker rebuilding such a program goes through the same path.

`assign` sets a parameter's value without cvxpy's per-assignment projection check (same stored value);
`box_vectors` lays a {Variable: (lo, hi)} box out in the canonical variable order. The solver call itself is in
`weak_duality`; `attncert.audit` rebuilds programs through this module without solving.
"""
from __future__ import annotations

import cvxpy as cp
import numpy as np
import scipy.sparse as sp


_PLAIN = frozenset({"nonneg"})  # the only attribute the relaxations' parameters use


def assign(param: cp.Parameter, value) -> None:
    """param.value = value; a finite value of the right shape (and sign) is stored without cvxpy's check.

    cvxpy validates every assignment by projecting the value onto the parameter's attributes and comparing
    (~0.1 ms each, a few dozen per unit). A finite float64 value of the parameter's shape that satisfies its
    sign attribute passes that check unchanged, so it is stored directly (a float for a scalar parameter, as
    cvxpy stores it); anything else goes through cvxpy's own setter (and its errors).
    """
    kind = getattr(param, "_attncert_kind", None)
    if kind is None:  # (only attributes checked here, nonnegative), per parameter
        attrs = {k for k, v in param.attributes.items() if v is True}
        kind = param._attncert_kind = (attrs <= _PLAIN and hasattr(param, "save_value"), "nonneg" in attrs)
    val = np.asarray(value, dtype=np.float64)
    if (not kind[0] or val.shape != param.shape or not np.isfinite(val).all()
            or (kind[1] and (val < 0).any())):
        param.value = value
        return
    param.save_value(float(val) if val.ndim == 0 else val.copy())


class CompiledProgram:
    """cvxpy's canonical conic data of one parametrized problem (for Clarabel), refilled from parameter values.

    Built from cvxpy's own compiled problem (`get_problem_data`'s ParamConeProg): the parameter-to-data tensor of
    (A, b) in cvxpy's reduced form, the objective's tensor, the parameter columns, variable offsets and cone
    dimensions. `data()` returns (c, A, b) exactly as `get_problem_data` would for the current parameter values
    (cvxpy's negated A, the same sparsity pattern with its explicit zeros); `compile` verifies that bitwise and
    returns None when it does not hold, so the caller keeps the cvxpy path.
    """

    def __init__(self, problem: cp.Problem, data: dict, inverse_data):
        from cvxpy.lin_ops.lin_op import CONSTANT_ID
        from cvxpy.settings import PARAM_PROB

        prog = data[PARAM_PROB]
        self.variables = problem.variables()
        self.offsets = var_offsets(inverse_data, self.variables)
        self.dims = data["dims"]
        self.nvar = int(data["c"].size)
        self.nparam = int(prog.total_param_size) + 1
        self.columns = []  # (parameter, first column, size)
        for pid, col in prog.param_id_to_col.items():
            if pid == CONSTANT_ID:
                self.const_col = int(col)
            else:
                self.columns.append((prog.id_to_param[pid], int(col), int(prog.param_id_to_size[pid])))
        prog.reduced_A.cache(False)
        self.R = sp.csr_matrix(prog.reduced_A.reduced_mat)  # reduced tensor: R @ params = A and b entries
        indices, indptr, shape = prog.reduced_A.problem_data_index
        if shape[1] != self.nvar + 1:
            raise RuntimeError("unexpected shape of cvxpy's data tensor")
        self.m = int(shape[0])
        self.k = int(indptr[self.nvar])  # entries of A (the last column is b)
        self.A_indices = np.asarray(indices[:self.k])
        self.A_indptr = np.asarray(indptr[:self.nvar + 1])
        self.b_rows = np.asarray(indices[self.k:])
        self.q = sp.csr_matrix(prog.q)  # objective tensor, (nvar + 1) x params
        self.P = sp.csc_array((self.nvar, self.nvar))
        self.cones = None

    @classmethod
    def compile(cls, problem: cp.Problem, solver: str = "CLARABEL"):
        """The compiled program, or None when cvxpy's internals differ from what this class reads."""
        try:
            data, _, inverse_data = problem.get_problem_data(solver, solver_opts={})
            out = cls(problem, data, inverse_data)
            if {id(prm) for prm, _, _ in out.columns} != {id(prm) for prm in problem.parameters()}:
                return None  # cvxpy replaced a parameter: its value would not follow the problem's
            c, A, b = out.data()
            ref = sp.csc_array(data["A"])
            same = (np.array_equal(c, data["c"]) and np.array_equal(b, data["b"]) and A.shape == ref.shape
                    and np.array_equal(A.indptr, ref.indptr) and np.array_equal(A.indices, ref.indices)
                    and np.array_equal(A.data, ref.data))
            return out if same else None
        except Exception:  # noqa: BLE001 - another cvxpy: keep its own path
            return None

    def params(self) -> np.ndarray:
        """cvxpy's parameter vector: every parameter's value (column-major) at its columns, 1 at the constant."""
        vec = np.zeros(self.nparam)
        vec[self.const_col] = 1.0
        for prm, col, size in self.columns:
            vec[col:col + size] = np.asarray(prm.value, dtype=np.float64).flatten(order="F")
        return vec

    def data(self) -> tuple[np.ndarray, sp.csc_array, np.ndarray]:
        """(c, A, b) of `get_problem_data` for the current parameter values."""
        vec = self.params()
        flat = self.R @ vec
        A = sp.csc_array((-flat[:self.k], self.A_indices, self.A_indptr), shape=(self.m, self.nvar))
        b = np.zeros(self.m)
        b[self.b_rows] = flat[self.k:]
        c = (self.q @ vec)[:self.nvar]
        return c, A, b


class OneShotProgram:
    """The same interface as `CompiledProgram` for a program compiled afresh on every `data()` call with the
    parameters' current values as constants (cvxpy's `ignore_dpp`): no parameter tensor is built."""

    def __init__(self, problem: cp.Problem):
        self.problem = problem
        self.variables = problem.variables()
        self.P = None
        self.cones = None

    def data(self) -> tuple[np.ndarray, sp.csc_array, np.ndarray]:
        """(c, A, b) of `get_problem_data(ignore_dpp=True)` for the current parameter values."""
        data, _, inverse_data = self.problem.get_problem_data("CLARABEL", solver_opts={}, ignore_dpp=True)
        self.offsets = var_offsets(inverse_data, self.variables)
        self.dims = data["dims"]
        self.nvar = int(data["c"].size)
        self.P = sp.csc_array((self.nvar, self.nvar))
        return np.asarray(data["c"], dtype=np.float64), sp.csc_array(data["A"]), np.asarray(data["b"], dtype=np.float64)


def mark_one_shot(problem: cp.Problem) -> cp.Problem:
    """Mark a program to be compiled per solve without cvxpy's parameter tensor (module docstring)."""
    problem._attncert_one_shot = True
    return problem


def one_shot(problem: cp.Problem) -> bool:
    return bool(getattr(problem, "_attncert_one_shot", False))


def compiled_program(problem: cp.Problem):
    """The problem's CompiledProgram (built on first use, stored on the problem), its OneShotProgram when marked
    one-shot, or None (cvxpy's path)."""
    if not hasattr(problem, "_attncert_compiled"):
        problem._attncert_compiled = (OneShotProgram(problem) if one_shot(problem)
                                      else CompiledProgram.compile(problem))
    return problem._attncert_compiled


def var_offsets(inverse_data, variables):
    """Offset of every variable in cvxpy's canonical variable vector."""
    ids = {v.id for v in variables}
    for inv in reversed(inverse_data):
        offs = getattr(inv, "var_offsets", None)
        if isinstance(offs, dict) and ids <= set(offs):
            return offs
    raise RuntimeError("cannot locate variable offsets in the cvxpy inverse data")


def box_vectors(box: dict, offsets: dict, nvar: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of a {Variable: (lo, hi)} box in cvxpy's canonical variable order (Fortran order per variable)."""
    lo = np.empty(nvar)
    hi = np.empty(nvar)
    for v, (blo, bhi) in box.items():
        o = offsets[v.id]
        lo[o:o + v.size] = np.broadcast_to(np.asarray(blo, dtype=np.float64), v.shape).flatten(order="F")
        hi[o:o + v.size] = np.broadcast_to(np.asarray(bhi, dtype=np.float64), v.shape).flatten(order="F")
    return lo, hi


def canonical_program(problem: cp.Problem, box: dict) -> dict | None:
    """The problem's conic data as the solver receives them (c, A, b, dims) and the box as (lo, hi); None when
    cvxpy's internals cannot be read (`CompiledProgram.compile`)."""
    compiled = compiled_program(problem)
    if compiled is None:
        return None
    c, A, b = compiled.data()
    lo, hi = box_vectors(box, compiled.offsets, compiled.nvar)
    return dict(c=c, A=A, b=b, dims=compiled.dims, lo=lo, hi=hi)
