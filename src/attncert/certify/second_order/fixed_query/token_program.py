"""The fixed-query relaxation as conic data assembled per token (no cvxpy, no solver: `token_solve` solves it).

Variables: the shared tau, then per token j the block x_j = (lam_j, Us_j, Uw_j, Vs_j, Vw_j[, nu_j]) of
`rows` (unit coordinates; nu only in the deviation form). Rows, each a family with one row (or one
cone) per token: the normalization sum_j E_lj (tau + kappa_j lam_j) = 1 (or tau = 1 for independent tokens),
the secant (C2), 0 <= lam <= tau, the monotonicity cuts (C4), the facets of P chosen for the solve (or the
ellipse's two cones), the deviation form's equality and cone, the lower (C1) and upper (C5) exponential cones.
Coefficients: `rows.weight_coefficients`. The rows of X (0 <= lam <= tau and the description of P) are
marked `simple`: the bound of `support_bound` replaces them by X itself.

Cost: O(n K) to build (K facet rows per token); the KKT matrix is an arrow (block diagonal plus the tau column
and the normalization row), so each interior-point iteration is O(n K).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.relaxation.rows import nu_bound, weight_coefficients

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

    @cached_property
    def abs_A(self) -> sp.csc_matrix:
        """|A| entrywise (the row costs and error terms of every bound from a dual; computed once per program)."""
        return abs(self.A)

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
    """The program of one unit. D: `monolithic.FixedRelaxationData` (kept tokens); edges: (n, K) indices of the
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
