"""The fixed-query relaxation as conic data assembled per token (no cvxpy), and its Clarabel solve.

Variables: the shared tau, then per token j the block x_j = (lam_j, Us_j, Uw_j, Vs_j, Vw_j[, nu_j]) of
`relaxation` (unit coordinates; nu only in the deviation form). Rows, each a family with one row (or one
cone) per token: the normalization sum_j E_lj (tau + kappa_j lam_j) = 1 (or tau = 1 for independent tokens),
the secant (C2), 0 <= lam <= tau, the monotonicity cuts (C4), the facets of P chosen for the solve (or the
ellipse's two cones), the deviation form's equality and cone, the lower (C1) and upper (C5) exponential cones.
Coefficients: `relaxation.weight_coefficients`. The rows of X (0 <= lam <= tau and the description of P) are
marked `simple`: the bound of `support_bound` replaces them by X itself.

Cost: O(n K) to build (K facet rows per token); the KKT matrix is an arrow (block diagonal plus the tau column
and the normalization row), so each interior-point iteration is O(n K).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.dual_certificate import (_CLARABEL_BASE, _CLARABEL_STATUS, POLISH_SECONDS,
                                                            _cone_slices, polish_dual, repair_dual)
from attncert.certify.second_order.relaxation import nu_bound, weight_coefficients

# Clarabel at 1e-8: the bound is computed from the dual with the exact P whatever the solver's accuracy; on the
# long-context units 1e-8 gave the same bounds as 1e-10 (to 4 digits of the gap) in half the time or less.
_BASE = dict(_CLARABEL_BASE, tol_gap_abs=1e-8, tol_gap_rel=1e-8, tol_feas=1e-8)
LADDER = (dict(_BASE, max_step_fraction=0.9),
          dict(_BASE, max_step_fraction=0.75),
          dict(_BASE, max_step_fraction=0.6, equilibrate_enable=False))
NEAR = 4  # consecutive edges on each side of the estimated vertex (linf)
GRID = 7  # global sigma grid of edges (linf)
ROUNDS = 3  # solves with cutting planes (linf)
MAX_EDGES = 40  # edges per token at most
CUT_STOP = 1e-8  # stop cutting once the violated mass weighs <= this x (1 + |primal|)
VIOLATION = 1e-9  # an atom this far above the boundary of P (unit value coordinate) gets a cut
RING = 16  # tangent cuts of each 3-dimensional second-order cone given to the first LP of `refined_duals`
REFINE_STALL = 1e-9  # ... stopping once a round raised the LP's optimum by at most this x (1 + |optimum|)
REFINE = 3  # rounds of tangent cuts of the outer-approximation LP after the polishing LP (`refined_duals`)
# variables of one token's block
LAM, US, UW, VS, VW, NU = range(6)


@dataclass
class Program:
    """Conic data (Clarabel's form: min c^T x s.t. A x + s = b, s in K) of the fixed-query relaxation."""

    c: np.ndarray
    A: sp.csc_matrix
    b: np.ndarray
    dims: SimpleNamespace  # zero, nonneg, soc (list), exp: rows in this order
    simple: np.ndarray  # bool per row: rows that describe X (dropped from the bound, X is used exactly)
    nv: int  # variables per token
    n: int
    tau_lo: float
    tau_hi: float
    nubar: np.ndarray  # per unit tau
    families: dict = field(default_factory=dict)  # row family -> (first row, cone dimension); token j's rows
    #                                                  of a family are first + dim j ... first + dim j + dim - 1

    def var(self, k: int) -> np.ndarray:
        return 1 + self.nv * np.arange(self.n) + k

    def box(self) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) per variable holding every lifted true point: tau in [tau_lo, tau_hi] (and 1 when tau is
        fixed), lam in [0, tau], the unit coordinates of U and V in [-tau, tau], 0 <= nu <= tau nubar. Used only
        to polish or refine a dual (`polished_dual`, `refined_solutions`); the certified bound takes the exact
        set X (`support_bound`)."""
        t_lo, t_hi = min(self.tau_lo, 1.0), max(self.tau_hi, 1.0)
        lo, hi = np.zeros(self.c.size), np.zeros(self.c.size)
        lo[0], hi[0] = t_lo, t_hi
        hi[self.var(LAM)] = t_hi
        for k in (US, UW, VS, VW):
            lo[self.var(k)], hi[self.var(k)] = -t_hi * (1.0 + 1e-9), t_hi * (1.0 + 1e-9)
        if self.nv > NU:
            hi[self.var(NU)] = t_hi * self.nubar
        return lo, hi


class _Rows:
    """The constraint matrix, one row family at a time: per token one row, or one cone of dimension `len(coords)`.

    A family is (kind, coords, simple, name); each coordinate is a list of (variable k or "tau", coef (n,) or
    scalar) terms and its row reads s = -(sum coef x), so a family states coords(x) in the cone. Rows are laid out
    kind by kind (zero, nonneg, soc, exp; Clarabel's order), family by family, token-major inside a family. The
    normalization row (one row for all tokens, right-hand side 1) is the first zero row.
    """

    KINDS = ("zero", "nonneg", "soc", "exp")

    def __init__(self, n: int, nv: int):
        self.n, self.nv = n, nv
        self.families = []
        self.normalization = None

    def add(self, kind: str, coords: list, simple: bool = False, name: str = ""):
        self.families.append((kind, coords, simple, name))

    def _col(self, k):
        tok = np.arange(self.n)
        return np.zeros(self.n, dtype=np.int64) if k == "tau" else 1 + self.nv * tok + k

    def assemble(self):
        rows, cols, vals, simple, families = [], [], [], [], {}
        counts = dict.fromkeys(self.KINDS, 0)
        soc_sizes, tok = [], np.arange(self.n)
        r0 = 0
        if self.normalization is not None:  # sum of coef * var = 1: s = 1 - (sum coef x)
            for k, coef in self.normalization:
                col = np.zeros(1, dtype=np.int64) if k == "tau" else self._col(k)
                rows.append(np.full(col.size, r0))
                cols.append(col)
                vals.append(np.broadcast_to(np.asarray(coef, dtype=np.float64), col.shape))
            simple.append(np.zeros(1, dtype=bool))
            families["norm"] = (0, 1)
            counts["zero"] = r0 = 1
        for kind in self.KINDS:
            for fam_kind, coords, simp, name in self.families:
                if fam_kind != kind:
                    continue
                dim = len(coords)
                if name:
                    families[name] = (r0, dim)
                for coord, terms in enumerate(coords):
                    for k, coef in terms:
                        rows.append(r0 + dim * tok + coord)
                        cols.append(self._col(k))
                        vals.append(-np.broadcast_to(np.asarray(coef, dtype=np.float64), (self.n,)))
                simple.append(np.full(dim * self.n, simp))
                counts[kind] += dim * self.n
                if kind == "soc":
                    soc_sizes += [dim] * self.n
                r0 += dim * self.n
        A = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(r0, 1 + self.nv * self.n)).tocsc()
        b = np.zeros(r0)
        if self.normalization is not None:
            b[0] = 1.0
        dims = SimpleNamespace(zero=counts["zero"], nonneg=counts["nonneg"], soc=soc_sizes, exp=counts["exp"] // 3,
                               psd=[], p3d=[])
        return A, b, np.concatenate(simple), dims, families


def build_program(D, upper_cone: bool, mono: int, edges: np.ndarray | None = None, hs=None, hw=None, hb=None,
                  ellipse=None, k: dict | None = None, fix_tau: bool = False) -> Program:
    """The program of one unit. D: `fixed.FixedRelaxationData` (kept tokens); edges: (n, K) indices of the
    unit half-planes (hs, hw) <= hb of P per token (linf), or ellipse = (G, cs) (l2); neither: the rows the
    bound uses only (the certificate does not read the description of P). k: `weight_coefficients` of D
    (computed here when None). fix_tau: the normalization row is tau = 1 instead (independent tokens)."""
    n = D.A.size
    h = np.full(n, D.R_s)
    if k is None:
        k = weight_coefficients(D.A, h, D.eps_s, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, mono)
    deviation = D.deviation
    nv = 6 if deviation else 5
    R = _Rows(n, nv)
    R.normalization = [("tau", 1.0)] if fix_tau else [("tau", k["n_tau"]), (LAM, k["n_lam"])]
    R.add("nonneg", [[(LAM, -1.0), ("tau", k["sec_tau"]), (US, k["sec_U"]), (VS, k["sec_V"])]], name="secant")  # (C2)
    R.add("nonneg", [[(LAM, 1.0)]], simple=True)
    R.add("nonneg", [[("tau", 1.0), (LAM, -1.0)]], simple=True)
    for c in range(mono):  # (C4)
        R.add("nonneg", [[(VS, k["mV"][:, c]), (US, k["mU"][:, c]), (LAM, k["mlam"][:, c]), ("tau", k["mtau"][:, c])]],
              name=f"mono{c}")
    if edges is not None:  # facets of P: U in lam P, V in (tau - lam) P
        for e in range(edges.shape[1]):
            idx = edges[:, e]
            R.add("nonneg", [[(LAM, hb[idx]), (US, -hs[idx]), (UW, -hw[idx])]], simple=True)
            R.add("nonneg", [[("tau", hb[idx]), (LAM, -hb[idx]), (VS, -hs[idx]), (VW, -hw[idx])]], simple=True)
    if deviation:  # kappa lam = h y + h^2 nu, y = Us + Vs + tau;  (nu + tau, nu - tau, sqrt2 y) in SOC
        R.add("zero", [[(LAM, k["dv_lam"]), (US, -1.0), (VS, -1.0), ("tau", -1.0), (NU, -k["dv_nu"])]], name="dev")
        s2 = math.sqrt(2.0)
        R.add("soc", [[(NU, 1.0), ("tau", 1.0)], [(NU, 1.0), ("tau", -1.0)], [(US, s2), (VS, s2), ("tau", s2)]],
              name="dev_soc")
    if ellipse is not None:
        G, cs = ellipse
        R.add("soc", [[(LAM, cs)], [(US, G[0, 0]), (UW, G[0, 1])], [(US, G[1, 0]), (UW, G[1, 1])]], simple=True)
        R.add("soc", [[("tau", cs), (LAM, -cs)], [(VS, G[0, 0]), (VW, G[0, 1])], [(VS, G[1, 0]), (VW, G[1, 1])]],
              simple=True)
    if not deviation:  # (C1) (h (S + tau), tau, tau + kappa lam) in K_exp
        R.add("exp", [[(US, k["hU"]), (VS, k["hV"]), ("tau", k["hV"])], [("tau", 1.0)], [("tau", 1.0), (LAM, k["kt"])]],
              name="C1")
    if upper_cone:  # (C5) (-(h + 2 eps)(tau + kappa lam) - h (Vs + Ehat Us), tau + kappa lam, tau) in K_exp
        R.add("exp", [[("tau", -k["up_tau"]), (LAM, -k["up_lam"]), (VS, -k["up_V"]), (US, -k["up_U"])],
                      [("tau", 1.0), (LAM, k["kt"])], [("tau", 1.0)]], name="C5")
    A, b, simple, dims, families = R.assemble()
    tok = np.arange(n)
    c = np.zeros(A.shape[1])
    c[0] = -k["c_tau"]
    c[1 + nv * tok + LAM] = -k["c_lam"]
    c[1 + nv * tok + VW] = -k["c_V"]
    c[1 + nv * tok + UW] = -k["c_U"]
    nubar = nu_bound(h, D.eps_s, 1.0) if deviation else np.zeros(n)
    return Program(c, A, b, dims, simple, nv, n, k["tau_lo"], k["tau_hi"], nubar, families)


def polished_dual(prog: Program, z: np.ndarray) -> np.ndarray | None:
    """A second dual from the solver's: `dual_certificate.polish_dual` (each cone block replaced by its supporting
    cut at the repaired dual, the LP over the box of `Program.box` solved by HiGHS) on the program's own rows. An
    interior-point dual that is slightly off pays its stationarity residual to first order in the bound; the LP's
    multipliers pass within second order of the optimum (the cuts are tangent at the solver's point). It is one
    more point of K^* whose bound is computed and compared like any other; None when the LP fails."""
    lo, hi = prog.box()
    mag = np.maximum(np.abs(lo), np.abs(hi))
    row_cost = abs(prog.A) @ mag + np.abs(prog.b) + 1e-300
    with np.errstate(all="ignore"):
        zr = repair_dual(z, prog.dims, row_cost)
        return polish_dual(prog.c, prog.A, prog.b, prog.dims, zr, lo, hi)


def _cone_cuts(kind: str, S: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """For slacks S (one cone per row), the rows that violate their cone and the normals y in K^* of the supporting
    half-spaces y^T s' >= 0 that cut them off: (mask over the rows, Y (rows of the mask, dim)).

    Exponential cone {(x, y, z): y e^{x/y} <= z}: with r = x/y, the gradient of the convex, 1-homogeneous
    y e^{x/y} - z at s is (e^r, e^r (1 - r), -1), so y = (-e^r, -e^r (1 - r), 1) (on the boundary of K^*: the cut
    is tangent at the cone point with the same ratio r). Second-order cone {(t, v): ||v|| <= t}: y = (1, -v/||v||).
    A row within tol (relative) of its cone, or whose cut is undefined (y <= 0, e^r overflows, v = 0), gets none."""
    with np.errstate(all="ignore"):
        if kind == "exp":
            r = S[:, 0] / S[:, 1]
            er = np.exp(r)
            excess = S[:, 1] * er - S[:, 2]
            mask = (S[:, 1] > 0.0) & (r < 700.0) & (excess > tol * (np.abs(S[:, 1]) * er + np.abs(S[:, 2])))
            er, r = er[mask], r[mask]
            return mask, np.stack([-er, -er * (1.0 - r), np.ones_like(er)], axis=1)
        nv = np.linalg.norm(S[:, 1:], axis=1)
        mask = (nv > 0.0) & (nv - S[:, 0] > tol * (nv + np.abs(S[:, 0])))
        return mask, np.concatenate([np.ones((int(mask.sum()), 1)), -S[mask, 1:] / nv[mask, None]], axis=1)


def refined_duals(prog: Program, z: np.ndarray, iters: int = REFINE, ring: int = RING, tol: float = 1e-12) -> list:
    """The duals of `refined_solutions` (see there), in order."""
    return [zz for _, zz in refined_solutions(prog, z, iters, ring, tol)]


def refined_solutions(prog: Program, z: np.ndarray, iters: int = REFINE, ring: int = RING,
                      tol: float = 1e-12, stall: float = REFINE_STALL) -> list:
    """Duals of an outer approximation of the program by supporting cuts, refined from the solver's dual z.

    Start as `polished_dual` (one cut per cone block, at the repaired z) and solve the LP

        minimize c^T x   s.t.  zero-cone rows,  nonnegative rows,  every cut y_i^T (b_k - A_k x) >= 0,  x in the box

    (HiGHS). Then, `iters` times: at the LP's point x, every cone block k whose slack b_k - A_k x lies outside its
    cone gets the cut tangent there (`_cone_cuts`), and the LP is solved again, until no block is violated or the LP's
    optimum rose by at most `stall` x (1 + |optimum|) in the last round. Each LP is a relaxation of the conic
    program over the box, so its dual (equality and row multipliers, and per block sum_i mu_i y_i with mu_i >= 0, a
    point of K^*_k: K^* is a convex cone) is a dual of the program, bounded like any other (`support_bound`). The
    cuts approach each cone where the optimum sits: the interior-point dual is accurate to its tolerance relative to
    the row scale, the LP's to simplex accuracy, which decides near-degenerate half-widths (the curvature of the
    exponential cones is then ~h^2 of their scale) and the ellipse of l2 balls. Second-order cones of dimension 3
    (the ellipse of l2 balls, the deviation form) also get `ring` tangent cuts around the circle in the first LP.
    Returns the LPs' (point, dual) in order (empty when the first LP fails); the first dual is `polished_dual`'s up
    to those ring cuts."""
    from scipy.optimize import linprog

    lo, hi = prog.box()
    mag = np.maximum(np.abs(lo), np.abs(hi))
    with np.errstate(all="ignore"):
        zr = repair_dual(z, prog.dims, abs(prog.A) @ mag + np.abs(prog.b) + 1e-300)
    A, b, c = sp.csr_matrix(prog.A), prog.b, prog.c
    slices, m = _cone_slices(prog.dims)
    eq = np.concatenate([np.arange(a, e) for k, a, e in slices if k == "zero"] + [np.zeros(0, dtype=np.int64)])
    ub = np.concatenate([np.arange(a, e) for k, a, e in slices if k == "nonneg"] + [np.zeros(0, dtype=np.int64)])
    groups = {}  # (kind, dim) -> first rows of its cones
    for kind, a, e in slices:
        if kind in ("soc", "exp"):
            groups.setdefault((kind, e - a), []).append(a)
    groups = {key: np.asarray(v, dtype=np.int64) for key, v in groups.items()}
    batches = []  # (rows (k, dim): the rows of each cut's cone, Y (k, dim): its normal)

    for (kind, dim), first in groups.items():
        rows = first[:, None] + np.arange(dim)[None, :]
        Y = zr[rows]
        keep = np.any(Y != 0.0, axis=1)
        batches.append((rows[keep], Y[keep]))
        if kind == "soc" and dim == 3 and ring > 0:
            theta = 2.0 * np.pi * np.arange(ring) / ring
            circle = np.stack([np.ones(ring), -np.cos(theta), -np.sin(theta)], axis=1)
            batches.append((np.repeat(rows, ring, axis=0), np.tile(circle, (first.size, 1))))
    A_eq, b_eq = (A[eq], b[eq]) if eq.size else (None, None)
    out = []
    for it in range(iters + 1):
        ncut = sum(r.shape[0] for r, _ in batches)
        if ncut:
            cut_id, start = [], 0
            for r, _ in batches:
                cut_id.append(np.repeat(np.arange(start, start + r.shape[0]), r.shape[1]))
                start += r.shape[0]
            Ycut = sp.csr_matrix((np.concatenate([Y.ravel() for _, Y in batches]),
                                  (np.concatenate(cut_id), np.concatenate([r.ravel() for r, _ in batches]))),
                                 shape=(ncut, m))
            A_ub, b_ub = sp.vstack([A[ub], Ycut @ A], format="csr"), np.concatenate([b[ub], Ycut @ b])
        else:
            A_ub, b_ub = A[ub], b[ub]
        try:
            with np.errstate(all="ignore"):
                res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=np.stack([lo, hi], axis=1),
                              method="highs", options=dict(time_limit=POLISH_SECONDS))
        except (ValueError, np.linalg.LinAlgError):
            break
        if res.status != 0 or res.ineqlin is None or res.x is None:
            break
        zn = np.zeros(m)
        if eq.size:
            zn[eq] = -np.asarray(res.eqlin.marginals)
        mu = -np.asarray(res.ineqlin.marginals)
        zn[ub] = mu[:ub.size]
        mu_cut, start = np.maximum(mu[ub.size:], 0.0), 0
        for r, Y in batches:
            np.add.at(zn, r.ravel(), (mu_cut[start:start + r.shape[0], None] * Y).ravel())
            start += r.shape[0]
        out.append((np.asarray(res.x, dtype=np.float64), zn))
        if it == iters or (it > 0 and res.fun - previous <= stall * (1.0 + abs(res.fun))):
            break
        previous = res.fun
        s = b - A @ res.x
        new = 0
        for (kind, dim), first in groups.items():
            rows = first[:, None] + np.arange(dim)[None, :]
            mask, Y = _cone_cuts(kind, s[rows], tol)
            if mask.any():
                batches.append((rows[mask], Y))
                new += int(mask.sum())
        if not new:
            break
    return out


def edge_window(kv: np.ndarray, chain, near: int, grid: int) -> np.ndarray:
    """(m, K) facet rows per token: the `near` consecutive edges on each side of vertex kv_j of the upper chain
    and a global sigma grid of `grid` edges, plus 2 (rows 0, 1 are the sigma bounds, always included)."""
    off = np.arange(-near, near)
    close = np.clip(kv[:, None] + off[None, :], 0, chain.d - 1)
    gsig = np.linspace(-chain.R_s, chain.R_s, grid + 2)[1:-1]
    glob = np.clip(np.searchsorted(chain.sigma, gsig, side="right") - 1, 0, chain.d - 1)
    e = np.concatenate([close, np.broadcast_to(glob, (kv.size, glob.size))], axis=1) + 2
    bounds = np.broadcast_to(np.array([0, 1], dtype=np.int64), (kv.size, 2))
    return np.concatenate([bounds, e], axis=1)


def _clarabel(prog: Program, opts: dict):
    import clarabel

    cones = []
    if prog.dims.zero:
        cones.append(clarabel.ZeroConeT(prog.dims.zero))
    if prog.dims.nonneg:
        cones.append(clarabel.NonnegativeConeT(prog.dims.nonneg))
    cones += [clarabel.SecondOrderConeT(q) for q in prog.dims.soc]
    cones += [clarabel.ExponentialConeT()] * prog.dims.exp
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    for key, val in opts.items():
        setattr(settings, key, val)
    P = sp.csc_matrix((prog.c.size, prog.c.size))
    return clarabel.DefaultSolver(P, prog.c, prog.A, prog.b, cones, settings).solve()


def solve_once(prog, opts: dict):
    """One Clarabel solve of `prog` (c, A, b, dims) with the settings `opts`: (status, converged, raw result, log
    entry (solver, status, seconds)); a solver crash is a failed attempt with raw None."""
    t0 = time.perf_counter()
    try:
        raw = _clarabel(prog, opts)
    except Exception as exc:  # noqa: BLE001 - a solver crash is one failed attempt
        return "solver_error", False, None, ("CLARABEL", f"solver_error: {type(exc).__name__}: {exc}",
                                             time.perf_counter() - t0)
    status, ok = _CLARABEL_STATUS.get(str(raw.status), ("solver_error", False))
    return status, ok, raw, ("CLARABEL", status, time.perf_counter() - t0)


def solve_program(prog: Program, ladder=LADDER, iterate: bool = False):
    """Clarabel rungs until one converges. Returns (status, primal objective, x, z) of the converged attempt
    (x, z None when none converged) and the log [(solver, status, seconds)].

    iterate: when no rung converged, z is the last finite dual iterate of the last rung that returned one (x stays
    None): a dual bounded like any other (`support_bound` is sound for any z), and the start of the
    outer-approximation LPs of `refined_solutions`, which need no converged solve."""
    log, last = [], None
    for opts in ladder:
        status, ok, raw, entry = solve_once(prog, opts)
        log.append(entry)
        if raw is None:
            continue
        if ok:
            x, z = np.asarray(raw.x, dtype=np.float64), np.asarray(raw.z, dtype=np.float64)
            return status, -float(raw.obj_val), x, z, log
        zi = np.asarray(raw.z, dtype=np.float64)
        if iterate and zi.size == prog.b.size and np.all(np.isfinite(zi)):
            last = zi
    return (log[-1][1] if log else "not_run"), math.nan, None, last, log


def cuts(prog: Program, x: np.ndarray, D, chain, edges: np.ndarray) -> tuple[np.ndarray, float]:
    """Edges under the atoms U/lam, V/(tau - lam) that lie above the boundary of P; and their weighted height."""
    tau = x[0]
    lam = x[prog.var(LAM)]
    new_cols, total = [], 0.0
    for mass, s_col, w_col, weight in ((lam, US, UW, np.abs(prog.c[prog.var(UW)])),
                                       (tau - lam, VS, VW, np.abs(prog.c[prog.var(VW)]))):
        ok = mass > 1e-12 * max(tau, 1e-300)
        sig = np.where(ok, x[prog.var(s_col)] / np.where(ok, mass, 1.0), 0.0) * D.R_s
        om = np.where(ok, x[prog.var(w_col)] / np.where(ok, mass, 1.0), 0.0)
        sig = np.clip(sig, -chain.R_s, chain.R_s)
        height = om - np.interp(sig, chain.sigma, chain.omega) / D.rho_w
        above = ok & (height > VIOLATION)
        e = np.clip(np.searchsorted(chain.sigma, sig, side="right") - 1, 0, chain.d - 1)
        new_cols.append(np.where(above, e, edges[:, 0]))
        total += float(np.sum(np.where(above, weight * mass * height, 0.0)))
    return np.stack(new_cols, axis=1), total


def cutting_plane_rounds(D, upper_cone: bool, mono: int, edges: np.ndarray, facets: tuple, chain, ladder=LADDER,
                         rounds: int = ROUNDS, k: dict | None = None, fix_tau: bool = False, iterate: bool = False):
    """Solve, add the edges under the atoms that lie above P, solve again (at most `rounds` solves, linf).

    facets: (hs, hw, hb) of every edge (`separable.linf_rows`). Yields, per solve, (prog, facet rows per token,
    status, primal, x, z, log); x and z are None when no attempt converged (then it stops; iterate: z is then the
    last dual iterate, `solve_program`)."""
    hs, hw, hb = facets
    for rnd in range(1, rounds + 1):
        prog = build_program(D, upper_cone, mono, edges, hs, hw, hb, k=k, fix_tau=fix_tau)
        status, primal, x, z, log = solve_program(prog, ladder, iterate)
        yield prog, edges.shape[1], status, primal, x, z, log
        if x is None:
            return
        new, excess = cuts(prog, x, D, chain, edges - 2)
        if excess <= CUT_STOP * (1.0 + abs(primal)) or rnd == rounds or edges.shape[1] + 2 > MAX_EDGES:
            return
        edges = np.concatenate([edges, new + 2], axis=1)
