"""Second-order certificate, fixed query, at a cost linear in the number of keys n.

The relaxation is the one of `relaxation` ((C0)-(C4), and (C5) for the tight variant), in the same units and
with the same coefficients (`relaxation.weight_coefficients`). Two things differ from `fixed`:

1. The program is assembled as conic data directly (no cvxpy): one column block per token
   x_j = (lam_j, Us_j, Uw_j, Vs_j, Vw_j[, nu_j]) plus the shared tau, the rows of token j touching only x_j and
   tau. Its KKT matrix is an arrow (block diagonal plus the tau column and the normalization row), so an
   interior-point solve costs O(n) per iteration; building it is O(n K) for K facet rows per token.
2. The bound does not use the facets of P at all. Write X for the set every lifted true point lies in
   (tau in [tau_lo, tau_hi]; per token 0 <= lam_j <= tau, U_j in lam_j Phat, V_j in (tau - lam_j) Phat,
   0 <= nu_j <= tau nubar_j, with Phat the *exact* image of the ball in unit coordinates). For any dual
   vector z of the remaining rows (the weight rows (C1)-(C5), the deviation rows; repaired into K^*) and the
   normalization row (free), every point x of X satisfying the rows has

       f(x) <= f(x) + z^T (b - A x) = z^T b + g^T x,          g = -(c + A^T z),

   and the right-hand side separates: with tau scaled out,

       max_X g^T x = max_{tau in [tau_lo, tau_hi]} tau Q,
       Q = g_tau + sum_j [ max( g_lam_j + h(g_Us_j, g_Uw_j),  h(g_Vs_j, g_Vw_j) ) + nubar_j max(g_nu_j, 0) ],

   h the support function of Phat: h(a, b) = r ||a u_s / R_s + b u_w / rho_w||_* (l1 norm of the box, l2
   norm of the ball): one (n x 2) by (2 x d) product for all tokens. The bound z^T b + max(tau_lo Q, tau_hi Q)
   is sound for any z (the facets chosen for the solve, and the solver's accuracy, decide only how tight it
   is) and is rounded outward like `dual_certificate.weak_duality_bound`.

Facets for the solve (linf): per token the `near` consecutive edges on each side of the vertex of its estimated
optimum (`facets.vertex_dinkelbach`) and a global sigma grid; after a solve, tokens whose atoms U/lam, V/(tau-lam)
lie above the boundary of P get the edges under them (cutting planes, at most `rounds` solves; every round's
certified bound is sound, the smallest is kept).

Cost: building O(n K), each interior-point iteration O(n K), the bound O(n d). Measured growth in
`bench/context_length.py`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.dual_certificate import (_CLARABEL_BASE, _CLARABEL_STATUS, DATA_REL_ERR,
                                                            repair_dual)
from attncert.certify.second_order.facets import vertex_dinkelbach
from attncert.certify.second_order.relaxation import (MONOTONE_POINTS, SecondOrderResult, ellipse_matrix,
                                                      fallback_bound, nu_bound, representable, settle,
                                                      weight_coefficients)
from attncert.head.rounding import UNIT_ROUNDOFF, gamma, outward_affine, round_up

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
VIOLATION = 1e-9  # an atom this far above the boundary of P (unit value coordinate) gets a cut
CUT_STOP = 1e-5  # stop cutting once the violated mass weighs <= this x (1 + |primal|)
_U = UNIT_ROUNDOFF
# variables of one token's block
LAM, US, UW, VS, VW, NU = range(6)


@dataclass
class SeparableCertificate:
    """What certifies one bound: enough to recompute it without a solver (`bound_from_dual`)."""

    z: np.ndarray  # repaired dual vector (rows of `Program`; simple-set rows zeroed)
    bound: float  # certified upper bound in objective units
    primal: float  # solver's primal objective (diagnostic)
    status: str
    seconds: float
    log: list = field(default_factory=list)


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


def _support(a: np.ndarray, b: np.ndarray, gens: np.ndarray, norm: str) -> tuple[np.ndarray, np.ndarray]:
    """(h, err): h(a_j, b_j) = ||a_j gens[0] + b_j gens[1]||_* computed in float64, and a bound on its error.

    gens: (2, d) the unit generators r u_s / R_s and r u_w / rho_w (each row of dual norm <= 1 + 4u)."""
    M = a[:, None] * gens[0][None, :] + b[:, None] * gens[1][None, :]
    d = gens.shape[1]
    if norm == "linf":
        h = np.abs(M).sum(axis=1)
    else:
        h = np.sqrt((M * M).sum(axis=1))
    err = gamma(2 * d + 8) * (np.abs(a) + np.abs(b)) * (1.0 + 1e-9) + 4.0 * _U * h
    return h, err


def bound_from_dual(prog: Program, z: np.ndarray, gens: np.ndarray, norm: str,
                    data_rel_err: float = DATA_REL_ERR) -> tuple[float, np.ndarray]:
    """Sound upper bound on max f over the lifted true points, from any dual vector z (see module docstring).

    Returns (bound in objective units, the repaired z)."""
    n, nv = prog.n, prog.nv
    mag = np.ones(prog.c.size)  # per unit tau: |lam|, |Us|, |Uw|, |Vs|, |Vw| <= 1 on X; nu <= nubar
    if nv > NU:
        mag[prog.var(NU)] = prog.nubar
    mag *= 1.0 + 1e-9
    absA = abs(prog.A)
    row_cost = absA @ mag  # per unit tau (b enters once, below)
    zr = repair_dual(z, prog.dims, (row_cost * prog.tau_hi + np.abs(prog.b)) * (1.0 + data_rel_err) + 1e-300)
    zr[prog.simple] = 0.0
    g = -(prog.c + prog.A.T @ zr)
    col_nnz = np.diff(prog.A.indptr)
    ku = (col_nnz + 3) * _U
    g_err = ku / (1.0 - ku) * (np.abs(prog.c) + absA.T @ np.abs(zr))
    hU, eU = _support(g[prog.var(US)], g[prog.var(UW)], gens, norm)
    hV, eV = _support(g[prog.var(VS)], g[prog.var(VW)], gens, norm)
    up = g[prog.var(LAM)] + hU
    D = np.maximum(up, hV)
    if nv > NU:
        D = D + prog.nubar * np.maximum(g[prog.var(NU)], 0.0)
    Q = math.fsum(D.tolist()) + float(g[0])
    # errors per unit tau: of g (times the magnitude of its variable), of the support functions, of the sums
    err = float(g_err @ mag) + float(np.maximum(eU, eV).sum()) + 4.0 * _U * float(np.abs(D).sum() + np.abs(up).sum())
    err += 2.0 * np.spacing(abs(Q)) + data_rel_err * (float(np.abs(zr) @ row_cost) + float(np.abs(prog.c) @ mag))
    zb = math.fsum((zr * prog.b).tolist())
    Q_hi = Q + 2.0 * err
    total = zb + max(prog.tau_lo * Q_hi, prog.tau_hi * Q_hi)
    total += 4.0 * _U * (abs(zb) + prog.tau_hi * abs(Q_hi)) + data_rel_err * float(np.abs(zr) @ np.abs(prog.b))
    total += 1e-300
    if not math.isfinite(total):
        return math.inf, zr
    return round_up(total), zr


class _Rows:
    """Triplets of the constraint matrix, one row family at a time (rows counted per cone kind)."""

    def __init__(self, n: int, nv: int):
        self.n, self.nv = n, nv
        self.blocks = {"zero": [], "nonneg": [], "soc": [], "exp": []}

    def add(self, kind: str, terms: list, b=None, simple: bool = False, name: str = ""):
        """One row per token: sum of coef * var for (var k or 'tau', coef (n,)) terms, as s = b - A x."""
        self.blocks[kind].append((terms, b, simple, name))

    def assemble(self):
        rows, cols, vals, bvec, simple, counts, families = [], [], [], [], [], {}, {}
        r0 = 0
        tok = np.arange(self.n)
        for kind in ("zero", "nonneg", "soc", "exp"):
            start = r0
            for terms, b, simp, name in self.blocks[kind]:
                if name:
                    families[name] = (r0, 1)
                if b == "normalization":  # one row for all tokens
                    for k, coef in terms:
                        col = np.zeros(1, dtype=np.int64) if k == "tau" else 1 + self.nv * tok + k
                        rows.append(np.full(col.size, r0))
                        cols.append(col)
                        vals.append(np.broadcast_to(np.asarray(coef, dtype=np.float64), col.shape))
                    bvec.append(np.ones(1))
                    simple.append(np.zeros(1, dtype=bool))
                    r0 += 1
                    continue
                rr = r0 + tok
                for k, coef in terms:
                    col = np.zeros(self.n, dtype=np.int64) if k == "tau" else 1 + self.nv * tok + k
                    rows.append(rr)
                    cols.append(col)
                    vals.append(-np.broadcast_to(np.asarray(coef, dtype=np.float64), (self.n,)))
                bvec.append(np.zeros(self.n))
                simple.append(np.full(self.n, simp))
                r0 += self.n
            counts[kind] = r0 - start
        m = r0
        A = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                          shape=(m, 1 + self.nv * self.n)).tocsc()
        return A, np.concatenate(bvec), np.concatenate(simple), counts, families


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
    if fix_tau:
        R.add("zero", [("tau", 1.0)], b="normalization", name="norm")
    else:
        R.add("zero", [("tau", k["n_tau"]), (LAM, k["n_lam"])], b="normalization", name="norm")
    R.add("nonneg", [(LAM, -1.0), ("tau", k["sec_tau"]), (US, k["sec_U"]), (VS, k["sec_V"])], name="secant")  # (C2)
    R.add("nonneg", [(LAM, 1.0)], simple=True)
    R.add("nonneg", [("tau", 1.0), (LAM, -1.0)], simple=True)
    for c in range(mono):  # (C4)
        R.add("nonneg", [(VS, k["mV"][:, c]), (US, k["mU"][:, c]), (LAM, k["mlam"][:, c]), ("tau", k["mtau"][:, c])],
              name=f"mono{c}")
    if edges is not None:  # facets of P: U in lam P, V in (tau - lam) P
        for e in range(edges.shape[1]):
            idx = edges[:, e]
            R.add("nonneg", [(LAM, hb[idx]), (US, -hs[idx]), (UW, -hw[idx])], simple=True)
            R.add("nonneg", [("tau", hb[idx]), (LAM, -hb[idx]), (VS, -hs[idx]), (VW, -hw[idx])], simple=True)
    if deviation:  # kappa lam = h y + h^2 nu, y = Us + Vs + tau
        R.add("zero", [(LAM, k["dv_lam"]), (US, -1.0), (VS, -1.0), ("tau", -1.0), (NU, -k["dv_nu"])], name="dev")
    A, b, simple, counts, families = R.assemble()
    rows_A, b_parts, simple_parts, soc_sizes, exp_count = [A], [b], [simple], [], 0
    cols = 1 + nv * n
    tok = np.arange(n)
    top = [A.shape[0]]

    def block(name, triples_per_coord, kind_simple):
        """Rows of cones of dimension len(triples_per_coord), one cone per token, token-major."""
        dim = len(triples_per_coord)
        rr, cc, vv = [], [], []
        for coord, terms in enumerate(triples_per_coord):
            for kk, coef in terms:
                col = np.zeros(n, dtype=np.int64) if kk == "tau" else 1 + nv * tok + kk
                rr.append(dim * tok + coord)
                cc.append(col)
                vv.append(-np.broadcast_to(np.asarray(coef, dtype=np.float64), (n,)))
        M = sp.coo_matrix((np.concatenate(vv), (np.concatenate(rr), np.concatenate(cc))),
                          shape=(dim * n, cols)).tocsc()
        families[name] = (top[0], dim)
        top[0] += dim * n
        rows_A.append(M)
        b_parts.append(np.zeros(dim * n))
        simple_parts.append(np.full(dim * n, kind_simple))

    if deviation:  # (nu + tau, nu - tau, sqrt2 y) in SOC: nu >= y^2 / (2 tau)
        s2 = math.sqrt(2.0)
        block("dev_soc", [[(NU, 1.0), ("tau", 1.0)], [(NU, 1.0), ("tau", -1.0)], [(US, s2), (VS, s2), ("tau", s2)]],
              False)
        soc_sizes += [3] * n
    if ellipse is not None:
        G, cs = ellipse
        block("ellU", [[(LAM, cs)], [(US, G[0, 0]), (UW, G[0, 1])], [(US, G[1, 0]), (UW, G[1, 1])]], True)
        block("ellV", [[("tau", cs), (LAM, -cs)], [(VS, G[0, 0]), (VW, G[0, 1])], [(VS, G[1, 0]), (VW, G[1, 1])]],
              True)
        soc_sizes += [3] * (2 * n)
    if not deviation:  # (C1) (h (S + tau), tau, tau + kappa lam) in K_exp
        block("C1", [[(US, k["hU"]), (VS, k["hV"]), ("tau", k["hV"])], [("tau", 1.0)], [("tau", 1.0), (LAM, k["kt"])]],
              False)
        exp_count += n
    if upper_cone:  # (C5) (-(h + 2 eps)(tau + kappa lam) - h (Vs + Ehat Us), tau + kappa lam, tau) in K_exp
        block("C5", [[("tau", -k["up_tau"]), (LAM, -k["up_lam"]), (VS, -k["up_V"]), (US, -k["up_U"])],
                     [("tau", 1.0), (LAM, k["kt"])], [("tau", 1.0)]], False)
        exp_count += n
    A = sp.vstack(rows_A, format="csc")
    c = np.zeros(cols)
    c[0] = -k["c_tau"]
    c[1 + nv * tok + LAM] = -k["c_lam"]
    c[1 + nv * tok + VW] = -k["c_V"]
    c[1 + nv * tok + UW] = -k["c_U"]
    dims = SimpleNamespace(zero=counts["zero"], nonneg=counts["nonneg"], soc=soc_sizes, exp=exp_count, psd=[],
                           p3d=[])
    nubar = nu_bound(h, D.eps_s, 1.0) if deviation else np.zeros(n)
    return Program(c, A, np.concatenate(b_parts), dims, np.concatenate(simple_parts), nv, n, k["tau_lo"],
                   k["tau_hi"], nubar, families)


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


def solve_program(prog: Program, gens: np.ndarray, norm: str, ladder=LADDER, keep_dual: bool = False):
    """Clarabel rungs until one converges; the certified bound of every attempt (the smallest is kept).

    Returns (bound, status, primal, x or None, log) and, with keep_dual, the raw dual of the kept attempt."""
    best, best_status, primal, x_best, log, z_best = math.inf, "not_run", math.nan, None, [], None
    for opts in ladder:
        t0 = time.perf_counter()
        try:
            raw = _clarabel(prog, opts)
            status, ok = _CLARABEL_STATUS.get(str(raw.status), ("solver_error", False))
            z = np.asarray(raw.z, dtype=np.float64)
            bound = math.nan if keep_dual else bound_from_dual(prog, z, gens, norm)[0]
        except Exception as exc:  # noqa: BLE001 - a solver crash is one failed attempt
            log.append(("CLARABEL", f"solver_error: {type(exc).__name__}: {exc}", math.inf, time.perf_counter() - t0))
            continue
        log.append(("CLARABEL", status, bound, time.perf_counter() - t0))
        if bound < best or (keep_dual and ok):
            best, best_status = bound, status
            if ok:
                primal, x_best, z_best = -float(raw.obj_val), np.asarray(raw.x, dtype=np.float64), z
        if ok:
            break
    if keep_dual:
        return best, best_status, primal, x_best, log, z_best
    return best, best_status, primal, x_best, log


def unit_generators(D, norm: str) -> np.ndarray:
    """(2, d): r u_s / R_s and r u_w / rho_w, the generators of Phat (each of dual norm <= 1 up to rounding)."""
    return np.stack([D.radius * D.u_s / D.R_s, D.radius * D.u_w / D.rho_w])


def _initial_edges(D, chain, n_edges: int, near: int, grid: int) -> np.ndarray:
    """(n, K) edge indices per token: `near` consecutive edges on each side of its estimated vertex, a global
    sigma grid (padded by repetition; a repeated row is harmless)."""
    n = D.A.size
    _, kv = vertex_dinkelbach(D.A, D.w0, D.g0, np.tile(chain.sigma, (n, 1)), np.tile(chain.omega, (n, 1)))
    off = np.arange(-near, near)
    close = np.clip(kv[:, None] + off[None, :], 0, n_edges - 1)
    gsig = np.linspace(-chain.R_s, chain.R_s, grid + 2)[1:-1]
    glob = np.clip(np.searchsorted(chain.sigma, gsig, side="right") - 1, 0, n_edges - 1)
    return np.concatenate([close, np.broadcast_to(glob, (n, glob.size))], axis=1)


def _cuts(prog: Program, x: np.ndarray, D, chain, edges: np.ndarray) -> tuple[np.ndarray, float]:
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


FAMILY_ABOVE = 48  # more kept tokens than this: duals from the one-parameter family of token programs
FAMILY_TOP = 64  # grid points placed at the w of the tokens with the largest weight bounds ...
FAMILY_SPREAD = 32  # ... and spread evenly over the range of w


def _virtual_data(D, w: np.ndarray):
    """The token program at value offsets w (objective units) with weight scale E_l = 1, as relaxation data:
    token j's program is E_lj times this one at w = wt_j - t (the rows do not depend on E_l or on t)."""
    from dataclasses import replace

    G = w.size
    eps = np.full(G, float(np.max(D.eps_s)))
    return replace(D, A=np.full(G, D.R_s) + eps, w0=D.g0 + w * D.rho_o, eps_s=eps, eps_w=np.zeros(G), tail=0.0)


def _vertex_edges(D, chain, w: np.ndarray, near: int, grid: int) -> np.ndarray:
    """(G, K) edge indices (plus 2: rows 0, 1 are the sigma bounds) around the vertex maximizing
    e^sigma (w rho_o + omega) for each w, and a global sigma grid."""
    E = np.exp(chain.sigma - chain.sigma.max())
    kv = np.argmax(E[None, :] * (w[:, None] * D.rho_o + chain.omega[None, :]), axis=1)
    off = np.arange(-near, near)
    close = np.clip(kv[:, None] + off[None, :], 0, chain.d - 1)
    gsig = np.linspace(-chain.R_s, chain.R_s, grid + 2)[1:-1]
    glob = np.clip(np.searchsorted(chain.sigma, gsig, side="right") - 1, 0, chain.d - 1)
    e = np.concatenate([close, np.broadcast_to(glob, (w.size, glob.size))], axis=1) + 2
    return np.concatenate([np.zeros((w.size, 1), np.int64), np.ones((w.size, 1), np.int64), e], axis=1)


def _solve_tokens(D, upper_cone, mono, geometry, gens, norm, ladder, near, grid, rounds, log):
    """Solve the (independent, tau = 1) token programs of D; returns (prog, z, per-token primal values)."""
    if norm == "l2":
        prog = build_program(D, upper_cone, mono, ellipse=geometry, fix_tau=True)
        _, _, _, x, lg, z = solve_program(prog, gens, norm, ladder, keep_dual=True)
        log += lg
    else:
        chain, hs, hw, hb = geometry
        edges = _vertex_edges(D, chain, (D.w0 - D.g0) / D.rho_o, near, grid)
        for rnd in range(1, rounds + 1):
            prog = build_program(D, upper_cone, mono, edges, hs, hw, hb, fix_tau=True)
            _, _, p, x, lg, z = solve_program(prog, gens, norm, ladder, keep_dual=True)
            log += lg
            if x is None:
                break
            new, excess = _cuts(prog, x, D, chain, edges - 2)
            if excess <= CUT_STOP * (1.0 + abs(p)) or rnd == rounds or edges.shape[1] + 2 > MAX_EDGES:
                break
            edges = np.concatenate([edges, new + 2], axis=1)
    if x is None:
        return prog, None, None
    k = weight_coefficients(D.A, np.full(D.A.size, D.R_s), D.eps_s, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, mono)
    lam, Uw, Vw = x[prog.var(LAM)], x[prog.var(UW)], x[prog.var(VW)]
    psi = k["wt"] * (1.0 + k["kappa"] * lam) + k["c_V"] * Vw + k["c_U"] * Uw
    return prog, z, psi


def _root(El: np.ndarray, wt: np.ndarray, grid_w: np.ndarray, psi: np.ndarray, lo: float, hi: float) -> float:
    """t with sum_j El_j Psi(wt_j - t) = 0 for Psi interpolated on the grid (linear beyond its ends)."""
    slope_lo = (psi[1] - psi[0]) / (grid_w[1] - grid_w[0]) if grid_w.size > 1 else 1.0
    slope_hi = (psi[-1] - psi[-2]) / (grid_w[-1] - grid_w[-2]) if grid_w.size > 1 else 1.0

    def phi(t):
        w = wt - t
        v = np.interp(w, grid_w, psi)
        v = np.where(w < grid_w[0], psi[0] + (w - grid_w[0]) * slope_lo, v)
        v = np.where(w > grid_w[-1], psi[-1] + (w - grid_w[-1]) * slope_hi, v)
        return float(El @ v)

    while phi(hi) > 0 and hi - lo < 1e6:
        lo, hi = hi, hi + 2.0 * (hi - lo) + 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if phi(mid) > 0:
            lo = mid
        else:
            hi = mid
    return hi


def _grid(wt: np.ndarray, weight: np.ndarray, t: float, span: tuple) -> np.ndarray:
    top = wt[np.argsort(-weight)[:FAMILY_TOP]] - t
    g = np.unique(np.concatenate([top, np.linspace(span[0], span[1], FAMILY_SPREAD)]))
    keep = np.concatenate([[True], np.diff(g) > 1e-9 * max(1.0, float(np.abs(g).max()))])
    return g[keep]


def _family_bound(D, upper_cone, mono, geometry, gens, norm, ladder, near, grid, rounds):
    """Bound from duals of the one-parameter family of token programs (see the module docstring)."""
    n = D.A.size
    k = weight_coefficients(D.A, np.full(n, D.R_s), D.eps_s, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, mono)
    El, wt = k["El"], k["wt"]
    log = []
    t = 0.0
    span = (float(wt.min()) - 1.5, float(wt.max()) + 0.5)
    for _ in range(2):
        gw = _grid(wt, El * k["Ehat"], t, span)
        prog_v, z_v, psi = _solve_tokens(_virtual_data(D, gw), upper_cone, mono, geometry, gens, norm, ladder, near,
                                         grid, rounds, log)
        if z_v is None:
            return math.inf, "solver_error", math.nan, log
        t = _root(El, wt, gw, psi, -1.0, 2.0)
    real = build_program(D, upper_cone, mono, k=k)
    w = wt - t
    j = np.clip(np.searchsorted(gw, w) - 1, 0, gw.size - 1)
    j1 = np.minimum(j + 1, gw.size - 1)
    span_w = np.where(j1 > j, gw[j1] - gw[j], 1.0)
    al = np.clip(np.where(j1 > j, (w - gw[j]) / span_w, 0.0), 0.0, 1.0)
    z = np.zeros(real.b.size)
    z[real.families["norm"][0]] = t
    for name, (start, dim) in real.families.items():
        if name == "norm":
            continue
        sv, dv = prog_v.families[name]
        for c in range(dim):
            z[start + dim * np.arange(n) + c] = El * ((1.0 - al) * z_v[sv + dv * j + c] + al * z_v[sv + dv * j1 + c])
    bound, _ = bound_from_dual(real, z, gens, norm)
    return bound, "optimal", t, log


def _linf_rows(problem, D):
    """(chain, hs, hw, hb): every facet of the upper boundary of P in unit coordinates (rows 0, 1: the sigma
    bounds), each a valid half-plane of P whatever the rounding (`facets.unit_rows`)."""
    from attncert.certify.second_order.facets import unit_rows
    from attncert.certify.second_order.fixed import _image

    chain = _image(problem)
    H_all = np.stack([-chain.domega, chain.dsigma], axis=1)  # outward normals of the upper edges
    nrm = np.hypot(H_all[:, 0], H_all[:, 1])
    H_all = np.where(nrm[:, None] > 0, H_all / np.where(nrm > 0, nrm, 1.0)[:, None], np.array([0.0, 1.0]))
    b_all = D.radius * np.abs(H_all @ np.stack([D.u_s, D.u_w])).sum(axis=1) * (1.0 + gamma(D.u_s.size + 6))
    H = np.concatenate([np.array([[1.0, 0.0], [-1.0, 0.0]]), H_all])
    bb = np.concatenate([[D.R_s, D.R_s], b_all + 1e-300])
    hs_hw, hb = unit_rows(H, bb, D.R_s, D.rho_w)
    return chain, hs_hw[:, 0], hs_hw[:, 1], hb


def _to_g_units(bound: float, D) -> float:
    """A bound in objective units mapped to g (outward), with the dropped tokens' tail."""
    return outward_affine(D.g0, D.rho_o, bound, D.tail)


def second_order_separable(problem, upper_cone: bool = False, monotone_points: int = MONOTONE_POINTS,
                           ladder=LADDER, near: int = NEAR, grid: int = GRID, rounds: int = ROUNDS,
                           _both: bool = True) -> SecondOrderResult:
    """Sound upper bound on max g for a fixed query (mode "fixed"); see the module docstring."""
    from dataclasses import replace

    from attncert.certify.second_order.facets import unit_rows
    from attncert.certify.second_order.fixed import _image, _origin, _to_g, relaxation_data

    if problem.mode != "fixed":
        raise ValueError("second_order_separable expects mode='fixed'")
    t0 = time.perf_counter()
    fo = fallback_bound(problem)
    D = relaxation_data(problem, fo, origin=False)
    if not D.R_s > 1e-9 * max(1.0, D.R_w):
        return SecondOrderResult(fo, "static_scores", "first_order_static", time.perf_counter() - t0, False)
    why = representable(D.A, np.full(D.A.size, D.R_s), D.eps_s, width_only=True)
    if not why:
        D = replace(D, g0=_origin(problem, D.g0, fo)).drop_negligible()
        why = representable(D.A, np.full(D.A.size, D.R_s), D.eps_s)
    if why:
        return settle(math.inf, "not_run", "none", fo, t0, "fixed", math.nan, 0, 0, [], why)
    if upper_cone and _both and D.deviation:
        # half-widths below DEVIATION_BELOW: the upper cone (C5) is as ill-conditioned as (C1) there (curvature
        # ~h^2 below the solver's resolution) and its solves can end looser than the paper-like program, whose
        # bound is also a bound of the tight relaxation (a superset): keep the smaller
        tight = second_order_separable(problem, True, monotone_points, ladder, near, grid, rounds, _both=False)
        paper = second_order_separable(problem, False, monotone_points, ladder, near, grid, rounds)
        if paper.value < tight.value and not paper.fallback:
            paper.status += "; tight variant: the paper-like bound is smaller (upper cone ill-conditioned at h < 1e-3)"
            paper.seconds += tight.seconds
            return paper
        tight.seconds += paper.seconds
        return tight
    gens = unit_generators(D, problem.norm)
    log, best, best_status, primal, n_rounds, n_facets = [], math.inf, "not_run", math.nan, 0, 0
    if D.A.size > FAMILY_ABOVE:
        if problem.norm == "l2":
            geometry = ellipse_matrix(D.u_s, D.u_w, D.radius, D.R_s, D.rho_w)
        else:
            geometry = _linf_rows(problem, D)
        best, best_status, t, log = _family_bound(D, upper_cone, monotone_points, geometry, gens, problem.norm,
                                                  ladder, near, grid, rounds)
        val = _to_g(best, D)
        log = [(s, st, _to_g(b, D) if math.isfinite(b) else b, sec) for (s, st, b, sec) in log]
        return settle(val, best_status, "CLARABEL" if math.isfinite(val) else "none", fo, t0, "fixed",
                      _to_g(t, D) if math.isfinite(t) else math.nan, 2, 0, log, "not_run", math.nan)
    if problem.norm == "l2":
        prog = build_program(D, upper_cone, monotone_points, None, None, None, None,
                             ellipse=ellipse_matrix(D.u_s, D.u_w, D.radius, D.R_s, D.rho_w))
        best, best_status, p, _, log = solve_program(prog, gens, "l2", ladder)
        primal, n_rounds = p, 1
    else:
        chain, hs, hw, hb = _linf_rows(problem, D)
        edges = _initial_edges(D, chain, chain.d, near, grid) + 2  # rows 0, 1: the sigma bounds
        edges = np.concatenate([np.zeros((D.A.size, 1), np.int64), np.ones((D.A.size, 1), np.int64), edges], axis=1)
        for n_rounds in range(1, rounds + 1):
            prog = build_program(D, upper_cone, monotone_points, edges, hs, hw, hb)
            bound, status, p, x, lg = solve_program(prog, gens, "linf", ladder)
            log += lg
            if bound < best:
                best, best_status = bound, status
            n_facets = edges.shape[1]
            if x is None:
                break
            primal = p
            new, excess = _cuts(prog, x, D, chain, edges - 2)
            if excess <= CUT_STOP * (1.0 + abs(p)) or n_rounds == rounds or edges.shape[1] + 2 > MAX_EDGES:
                break
            edges = np.concatenate([edges, new + 2], axis=1)
    val = _to_g(best, D)
    gap = val - _to_g(primal, D) if math.isfinite(primal) else math.nan
    log = [(s, st, _to_g(b, D), sec) for (s, st, b, sec) in log]
    return settle(val, best_status, "CLARABEL" if math.isfinite(val) else "none", fo, t0, "fixed",
                  _to_g(primal, D) if math.isfinite(primal) else math.nan, n_rounds, n_facets, log, "not_run", gap)
