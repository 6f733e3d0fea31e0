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

The solver calls that produce z: `solve_ladder`.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.dual_bound.data_error import DATA_REL_ERR
from attncert.head.rounding import UNIT_ROUNDOFF, round_up

POLISH_SECONDS = 1.0  # time limit of the polishing LP


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
