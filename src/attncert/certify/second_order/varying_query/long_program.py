"""The factored varying-query program at a cost linear in the number of keys: conic data assembled per row family.

The relaxation is `factored`'s (docs/certificate.md §5.1), with two changes that make every interior-point
iteration linear in n:

* **the query's shift through d_h.** The keys read the query perturbation only through the d_h-dimensional
  delta_i W_Q: with the key-space centering of `VaryingData(center="key")`, p_j = W_Q kq_j, so

      etahat_j = (r / H_j) kq_j . Y,     Y = W_Q^T W,     W = tau delta_i / r in tau B_1,

  d_h equality rows with d entries each and one row with d_h entries per key (n d_h + d d_h nonzeros instead of
  the n d of a d-dimensional link). The query token's own (sigma, omega) still reads W directly (two rows).
* **budgets of the query factor's second moments** on the pairs of the TOP_KEYS heaviest keys and on all keys
  (`varying_query.program.budget_subsets`, a number of rows independent of n beyond PAIRS_UP_TO keys), the
  all-keys bound computed on the smaller of the two Gram matrices (`all_keys_budget`).

* **the keys' support cuts** (linf, `key_support_cut`): per multiplier t given, one row per key bounding its
  Lagrangian term by its exact maximum over the key's own set.

Everything else is the same row for row: the b level (exact hull of (tau, tau t, tau e^{H(t+1)})), the quadratic
upper bounds of the second moments, the key factor's (C1)-(C4) [(C5)] with base b_j, the bilinear coordinate, the
facets of each token's P (linf; a window of consecutive edges around the token's estimated vertex and a sigma
grid, plus cutting planes) or its ellipse (l2), the normalization and the objective.

Builder code only (no solver): `build_long_program` is a function of `VaryingData` (key-centered, negligible tokens
dropped), W_Q, the build key and the facet edges, so that `attncert.audit` rebuilds the same (c, A, b, cones, box)
bit for bit. The box holds every lifted true point; the certificate is weak duality over it
(`weak_duality.weak_duality_bound`), never the solver's primal.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from attncert.certify.second_order.relaxation.facets import UpperChainFacets, unit_rows
from attncert.certify.second_order.relaxation.key_support_cut import support_row
from attncert.certify.second_order.relaxation.rows import ellipse_matrix, softmax_bounds, weight_coefficients
from attncert.certify.second_order.varying_query.box_scaling import box_scalings
from attncert.certify.second_order.varying_query.data import VaryingData
from attncert.certify.second_order.varying_query.shift_moment import cut_rows, plain_cut_bound
from attncert.certify.second_order.varying_query.program import (QUAD_POINTS, budget_subsets, quadratic_rows,
                                                                    value_offsets, widths)
from attncert.head.projected_ball import projected_ball
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

_U = UNIT_ROUNDOFF
#: How far a rebuilt query budget may differ from a stored one, relative (`attncert.audit.program_link`): every
#: budget is an eigenvalue bound inflated by (1 + 1e-9) beyond its float-error allowance (`all_keys_budget`,
#: `query_budget`), and BLAS/LAPACK give its last bits differently with another thread count or machine (measured:
#: up to 3e-15 between 1 and 2 OpenBLAS threads at 512 keys). A budget within 2^-40 (9.1e-13) below the rebuilt
#: one keeps more than 99.9 % of that inflation, so it is still a valid bound.
BUDGET_REL_TOL = 2.0 ** -40
KEYS_BLOCKS = ("mu", "bt", "eta", "Q")  # per key (m = n - 1)
TOKEN_BLOCKS = ("lam", "Us", "Uw", "Ub", "Vs", "Vw", "Vb", "SU", "SV")  # per token (n, the query last)


def all_keys_budget(Vt: np.ndarray, norm: str, row_err: np.ndarray) -> float:
    """Lambda >= sum_j etahat_j^2 over every query perturbation (`varying_query.program.query_budget`, the
    all-keys row), from the Gram matrix of the smaller side: B diag(1/g) B^T (m x m) and diag(1/g)^(1/2) B^T B
    diag(1/g)^(1/2) (d x d) have the same nonzero eigenvalues and trace; linf: the smaller bound of the scalings g
    of `box_scaling.box_scalings` (ball: g = 1). Its entries are sums of the longer side's
    length, hence the rounding term. row_err_j bounds |etahat_j| - |(Vt_j . x)| (the float rows against the
    program's functional): sum (a + e)^2 <= sum a^2 + 3 sum e when |a|, e <= 1. Capped by m."""
    m, d = Vt.shape
    best = float(m)
    for g in (box_scalings(Vt) if norm == "linf" else [None]):
        Bs, scale = (Vt, 1.0) if g is None else (Vt / np.sqrt(g), float(g.sum()))
        G = Bs @ Bs.T if m <= d else Bs.T @ Bs
        lam = float(np.linalg.eigvalsh(G)[-1]) + 64.0 * _U * (max(m, d) + 10) * float(np.trace(G))
        best = min(best, lam * scale * (1.0 + 1e-9) + 3.0 * float(np.sum(row_err)) + 1e-12)
    return best


def chain_rows(chain: UpperChainFacets, scale_s: float, scale_w: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hs, hw, hb) of every half-plane of one upper chain in unit coordinates: index 0, 1 the sigma bounds, 2 + e
    edge e (an edge of zero length repeats the upper sigma bound: a valid, redundant row)."""
    d = chain.d
    N = np.stack([-chain.chain.domega, chain.chain.dsigma], axis=1)
    nrm = np.hypot(N[:, 0], N[:, 1])
    ok = nrm > 0
    N = np.where(ok[:, None], N / np.where(ok, nrm, 1.0)[:, None], 0.0)
    b = chain.radius * np.abs(N @ chain.gens).sum(axis=1) * (1.0 + gamma(d + 6)) + 1e-300
    H = np.concatenate([np.array([[1.0, 0.0], [-1.0, 0.0]]), np.where(ok[:, None], N, [[1.0, 0.0]])])
    b = np.concatenate([[chain.R_s, chain.R_s], np.where(ok, b, chain.R_s)])
    Hu, bu = unit_rows(H, b, scale_s, scale_w)
    return Hu[:, 0], Hu[:, 1], bu


def long_chains(D: VaryingData) -> tuple[UpperChainFacets, UpperChainFacets]:
    """linf: the keys' upper chain (from u_s) and the query token's (from u_q)."""
    keys = UpperChainFacets(D.u_s, D.u_w, D.radius, D.R_s, chain=projected_ball(D.u_s, D.u_w, D.radius, "linf"))
    query = UpperChainFacets(D.u_q, D.u_w, D.radius, D.R_q, chain=projected_ball(D.u_q, D.u_w, D.radius, "linf"))
    return keys, query


@dataclass
class LongProgram:
    """Clarabel's form: min c.x s.t. A x + s = b, s in K (zero, nonneg, soc sizes, exp count), and the box."""

    c: np.ndarray
    A: sp.csc_matrix
    b: np.ndarray
    dims: SimpleNamespace
    lo: np.ndarray
    hi: np.ndarray
    offsets: dict  # block name -> first column
    n: int
    d: int
    dh: int
    tau_lo: float
    tau_hi: float
    coef: dict = field(default_factory=dict)  # objective coefficients of Uw, Vw per token (for the cuts)
    # rows of A whose tau coefficient (column 0) is a query budget -Lambda_S (`_budgets`): an eigenvalue bound
    # computed through BLAS/LAPACK, whose last bits depend on the thread count (`BUDGET_REL_TOL`)
    budget_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    cut_lams: np.ndarray = field(default_factory=lambda: np.zeros(0))  # Lambda' of each shift cut (`shift_moment`)

    def block(self, x: np.ndarray, name: str) -> np.ndarray:
        size = {"tau": 1, "W": self.d, "Y": self.dh}.get(name, self.n - 1 if name in KEYS_BLOCKS else self.n)
        if name == "SC":
            size = self.c.size - self.offsets["SC"]
        return x[self.offsets[name]:self.offsets[name] + size]


class _Assembly:
    """Rows of one kind at a time; each family states coords(x) in the cone, one cone per row index r. A term is
    (block, coef) (block index r, or column 0 of the block for "tau"; "base" is bt_r for a key and tau for the
    query token) or ("cols", columns (rows, k), coefficients (rows, k))."""

    KINDS = ("zero", "nonneg", "soc", "exp")

    def __init__(self, offsets: dict, m: int):
        self.off, self.m = offsets, m
        self.fams = {k: [] for k in self.KINDS}
        self.rhs = {k: [] for k in self.KINDS}
        self.tagged: dict = {}  # tag -> the rows of A its families occupy (filled by `assemble`)

    def add(self, kind: str, rows: int, coords: list, rhs=None, tag: str | None = None):
        """The family s = rhs + coords(x) in the cone (rhs: the constant of each coordinate, broadcast to rows;
        Clarabel's s = b - A x, so A holds the negated coefficients). tag: name the rows (`assemble` records
        where they land in A)."""
        self.fams[kind].append((rows, coords, rhs, tag))

    def _cols(self, name: str, rows: int) -> np.ndarray:
        r = np.arange(rows)
        if name == "tau":
            return np.zeros(rows, dtype=np.int64)
        if name == "base":
            return np.where(r < self.m, self.off["bt"] + np.minimum(r, self.m - 1), 0)
        return self.off[name] + r

    def assemble(self, nvar: int):
        rr, cc, vv, bb, socs = [], [], [], [], []
        r0 = 0
        counts = dict.fromkeys(self.KINDS, 0)
        for kind in self.KINDS:
            for rows, coords, rhs, tag in self.fams[kind]:
                dim = len(coords)
                base = r0 + dim * np.arange(rows)
                if tag is not None:
                    self.tagged.setdefault(tag, []).append(base)
                b = np.zeros(dim * rows)
                for k, terms in enumerate(coords):
                    for term in terms:
                        if term[0] == "cols":
                            cols, coef = np.asarray(term[1]), np.asarray(term[2], dtype=np.float64)
                            rr.append(np.repeat(base + k, cols.shape[1]))
                            cc.append(cols.ravel())
                            vv.append(-coef.ravel())
                        else:
                            rr.append(base + k)
                            cc.append(self._cols(term[0], rows))
                            vv.append(-np.broadcast_to(np.asarray(term[1], dtype=np.float64), (rows,)))
                    if rhs is not None:
                        b[k::dim] = np.broadcast_to(np.asarray(rhs[k], dtype=np.float64), (rows,))
                bb.append(b)
                if kind == "soc":
                    socs += [dim] * rows
                counts[kind] += dim * rows
                r0 += dim * rows
        A = sp.coo_matrix((np.concatenate(vv), (np.concatenate(rr), np.concatenate(cc))), shape=(r0, nvar)).tocsc()
        A.sum_duplicates()
        A.eliminate_zeros()
        dims = SimpleNamespace(zero=counts["zero"], nonneg=counts["nonneg"], soc=socs, exp=counts["exp"] // 3,
                               psd=[], p3d=[])
        return A, np.concatenate(bb), dims


def build_long_program(D: VaryingData, W_Q: np.ndarray, upper_cone: bool, mono: int, second: bool = True,
                       edges: list | None = None, tau_exp: int = 0, shift_cuts=(), support_ts=(),
                       memo: dict | None = None) -> LongProgram:
    """The program of one unit. D: key-centered `VaryingData` after `drop_negligible` (the query token last);
    edges (linf): per token the indices into `chain_rows` of its half-planes (keys: the keys' chain, the query
    token: its own).

    tau_exp: the program is homogeneous in (tau, x) but for the normalization, so multiplying every lower weight
    bound E_l (and the objective's E_l-proportional coefficients) by F = 2^tau_exp is the same program in the
    variables x / F, with the same optimum and the same certified bounds; a power of two adds no rounding. It
    only changes what the interior-point solver sees (`varying_query.long.ATTEMPTS`).

    shift_cuts: pairs (w, F) of `shift_moment` cuts (keys' weights w (m,), F (d_h, d_h)); each adds a column s
    (block "SC"), the row s = Lambda' tau - sum_j w_j Q_j and the cone ||(2 F Y, s - tau)|| <= s + tau.

    support_ts (linf): multipliers t of the normalization; each adds the keys' support cuts at t
    (`key_support_cut`), one row per key.

    memo: a dict the caller keeps across the builds of one unit (same D and W_Q): the budgets, each shift cut's
    Lambda' and each t's support rows are computed once (the same bits as without it)."""
    n, d, m = D.n, D.d, D.n - 1
    dh = W_Q.shape[1]
    shift_cuts = shift_cut_data(shift_cuts, m, dh) if second else []
    sizes = {"tau": 1, "W": d, "Y": dh} | {k: m for k in KEYS_BLOCKS} | {k: n for k in TOKEN_BLOCKS}
    sizes["SC"] = len(shift_cuts)
    memo = {} if memo is None else memo
    # Lambda' of each cut, at most its plain bound sum w_j + ||F||_F^2 sum_k c_k^2 (|etahat_j| <= 1, |(W_Q^T x)_k| <=
    # c_k: `_box`'s column norms): elementwise numpy only, so the box of s below has the same bits on every machine
    plain = [plain_cut_bound(w, F, W_Q, D.norm) for w, F in shift_cuts]
    cut_lams = [min(shift_cut_bound(D, W_Q, w, F, memo), c) for (w, F), c in zip(shift_cuts, plain)]
    offsets, col = {}, 0
    for name in ("tau", "W", "Y", *KEYS_BLOCKS, *TOKEN_BLOCKS, "SC"):
        offsets[name], col = col, col + sizes[name]
    nvar = col
    Hf, hk = widths(D)
    k = weight_coefficients(D.A - Hf, hk, D.eps, D.w0, D.eps_w, D.g0, D.rho_o, D.rho_w, mono)
    F = math.ldexp(1.0, int(tau_exp))
    for name in ("El", "c_lam", "c_V", "c_U"):
        k[name] = k[name] * F
    El = k["El"]
    wt = value_offsets(D)
    kb = np.expm1(2.0 * Hf[:m])
    act = D.active
    ks, kbb, ib = D.scales[:, 0] * act[:, 0] / hk, D.scales[:, 3] * act[:, 3] / hk, act[:, 3] * (1.0 + 4.0 * _U)
    R = _Assembly(offsets, m)
    tau, one = ("tau", 1.0), 1.0
    # zero rows: the normalization, the b level, the links, the S definitions
    norm_cols = np.concatenate([[0], offsets["bt"] + np.arange(m), offsets["lam"] + np.arange(n)])
    R.add(
        "zero", 1, [[("cols", norm_cols[None], -np.concatenate([[El[m]], El[:m], El * k["kappa"]])[None])]], rhs=[1.0]
    )
    R.add("zero", m, [[("bt", -one), tau, ("mu", kb)]])
    lead = key_lead(D)
    y_cols = offsets["Y"] + np.tile(np.arange(dh), (m, 1))
    R.add("zero", m, [[("eta", -one), ("cols", y_cols, lead[:, None] * D.kq[:m])]])
    R.add("zero", dh, [[("Y", -one), ("cols", offsets["W"] + np.tile(np.arange(d), (dh, 1)), W_Q.T)]])
    R.add("zero", n, [[("SU", -one), ("Us", ks), ("Ub", kbb)]])
    R.add("zero", n, [[("SV", -one), ("Vs", ks), ("Vb", kbb)]])
    qrows = D.Vt[m:]  # the query token's sigma and omega through W
    for s_blk, v_blk, row in (("Us", "Vs", qrows[0]), ("Uw", "Vw", qrows[1])):
        R.add("zero", 1, [[("cols", np.array([[offsets[s_blk] + m, offsets[v_blk] + m]]), -np.ones((1, 2))),
                           ("cols", (offsets["W"] + np.arange(d))[None], row[None])]])
    # nonnegative rows
    R.add("nonneg", m, [[("mu", one)]])
    R.add("nonneg", m, [[tau, ("mu", -one)]])
    R.add("nonneg", m, [[("eta", one), tau, ("mu", -2.0)]])
    if second:
        S = budget_subsets(m, np.argsort(-D.A[:m], kind="stable"))
        if "budgets" not in memo:
            memo["budgets"] = _budgets(D, W_Q, S)
        Lb = memo["budgets"]
        R.add("nonneg", m, [[tau, ("Q", -one)]])
        rows_S, cols_S = np.nonzero(S)
        width = int(S.sum(axis=1).max())
        cols = np.full((S.shape[0], width), offsets["Q"], dtype=np.int64)
        coef = np.zeros((S.shape[0], width))
        for i in range(S.shape[0]):
            c_i = cols_S[rows_S == i]
            cols[i, :c_i.size], coef[i, :c_i.size] = offsets["Q"] + c_i, -S[i, c_i]
        R.add("nonneg", S.shape[0], [[("cols", np.concatenate([np.zeros((S.shape[0], 1), np.int64), cols], axis=1),
                                       np.concatenate([Lb[:, None], coef], axis=1))]], tag="budget")
        for i, ((w, _), lam_i) in enumerate(zip(shift_cuts, cut_lams)):  # s_i = Lambda'_i tau - sum_j w_j Q_j
            R.add("zero", 1, [[("cols", np.concatenate([[0, offsets["SC"] + i], offsets["Q"] + np.arange(m)])[None],
                                np.concatenate([[lam_i, -1.0], -np.asarray(w, dtype=np.float64)])[None])]],
                  tag="budget")
        qa, qb, qc = quadratic_rows(Hf[:m])
        for c in range(QUAD_POINTS):
            R.add("nonneg", m, [[("tau", qa[:, c]), ("eta", qb[:, c]), ("Q", qc[:, c]), ("mu", -one)]])
    R.add("nonneg", n, [[("base", k["sec_tau"]), ("SU", k["sec_U"]), ("SV", k["sec_V"]), ("lam", -one)]])
    R.add("nonneg", n, [[("lam", one)]])
    R.add("nonneg", n, [[("base", one), ("lam", -one)]])
    for c in range(mono):
        R.add("nonneg", n, [[("SV", k["mV"][:, c]), ("SU", k["mU"][:, c]), ("lam", k["mlam"][:, c]),
                             ("base", k["mtau"][:, c])]])
    chains = long_chains(D) if D.norm == "linf" else None  # the keys' and the query token's chains
    if chains is not None and m:
        for t in support_ts:
            c_base, c_lam, c_V, c_U = support_row(D, hk, k["kappa"], k["Ehat"], wt, chains[0], t, memo)
            R.add("nonneg", m, [[("bt", c_base), ("lam", -c_lam), ("Vw", -c_V), ("Uw", -c_U)]], tag="support")
    R.add("nonneg", n, [[("lam", ib), ("Ub", -one)]])
    R.add("nonneg", n, [[("lam", ib), ("Ub", one)]])
    R.add("nonneg", n, [[("base", ib), ("lam", -ib), ("Vb", -one)]])
    R.add("nonneg", n, [[("base", ib), ("lam", -ib), ("Vb", one)]])
    if D.norm == "linf":
        R.add("nonneg", d, [[tau, ("W", -one)]])
        R.add("nonneg", d, [[tau, ("W", one)]])
        _facet_rows(R, D, edges, offsets, m, chains)
    else:
        R.add("soc", 1, [[tau]] + [[("cols", np.array([[offsets["W"] + i]]), np.ones((1, 1)))] for i in range(d)])
        G, cs = ellipse_matrix(D.u_s, D.u_w, D.radius, D.scales[0, 0], D.rho_w)
        Gq, csq = ellipse_matrix(D.u_q, D.u_w, D.radius, D.scales[-1, 0], D.rho_w)
        Gt = np.broadcast_to(G, (n, 2, 2)).copy()
        Gt[-1] = Gq
        cst = np.where(np.arange(n) < m, cs, csq)
        R.add("soc", n, [[("lam", cst)], [("Us", Gt[:, 0, 0]), ("Uw", Gt[:, 0, 1])],
                         [("Us", Gt[:, 1, 0]), ("Uw", Gt[:, 1, 1])]])
        R.add("soc", n, [[("base", cst), ("lam", -cst)], [("Vs", Gt[:, 0, 0]), ("Vw", Gt[:, 0, 1])],
                         [("Vs", Gt[:, 1, 0]), ("Vw", Gt[:, 1, 1])]])
    if second:
        R.add("soc", m, [[("Q", one), tau], [("Q", one), ("tau", -one)], [("eta", 2.0)]])
        y_row = (offsets["Y"] + np.arange(dh))[None]
        for i, (_, F) in enumerate(shift_cuts):
            sc = offsets["SC"] + i
            R.add("soc", 1, [[("cols", np.array([[sc, 0]]), np.ones((1, 2)))],
                             [("cols", np.array([[sc, 0]]), np.array([[1.0, -1.0]]))]]
                  + [[("cols", y_row, 2.0 * F[k][None])] for k in range(dh)])
    # exponential cones: the b level, (C1), (C5)
    R.add("exp", m, [[("eta", Hf[:m]), ("tau", Hf[:m])], [tau], [("bt", one)]])
    R.add("exp", n, [[("SU", k["hU"]), ("SV", k["hV"]), ("base", k["hV"])], [("base", one)],
                     [("base", one), ("lam", k["kt"])]])
    if upper_cone:
        R.add("exp", n, [[("base", -k["up_tau"]), ("lam", -k["up_lam"]), ("SV", -k["up_V"]), ("SU", -k["up_U"])],
                         [("base", one), ("lam", k["kt"])], [("base", one)]])
    A, b, dims = R.assemble(nvar)
    c = np.zeros(nvar)
    c_base = El * wt + 4.0 * _U * El * np.abs(wt) + 1e-300
    c[offsets["bt"]:offsets["bt"] + m] -= c_base[:m]
    c[0] -= c_base[m]
    c[offsets["lam"]:offsets["lam"] + n] -= k["c_lam"]
    c[offsets["Vw"]:offsets["Vw"] + n] -= k["c_V"]
    c[offsets["Uw"]:offsets["Uw"] + n] -= k["c_U"]
    tau_lo, tau_hi = softmax_bounds(El, El * k["Ehat"] * np.exp(2.0 * Hf))
    lo, hi = _box(D, W_Q, offsets, nvar, tau_lo, tau_hi, Hf, second)
    for i, cap in enumerate(plain):  # 0 <= s = Lambda' tau - sum_j w_j Q_j <= Lambda' tau_hi at a true point
        hi[offsets["SC"] + i] = cap * tau_hi * (1.0 + 1e-9)
    budget_rows = np.concatenate(R.tagged.get("budget", [np.zeros(0, dtype=np.int64)]))
    return LongProgram(c, A, b, dims, lo, hi, offsets, n, d, dh, tau_lo, tau_hi,
                       dict(Uw=np.asarray(k["c_U"]), Vw=np.asarray(k["c_V"]), El=np.asarray(El), wt=wt,
                            kappa=np.asarray(k["kappa"]), Ehat=np.asarray(k["Ehat"]), hk=hk),
                       budget_rows, np.asarray(cut_lams))


def shift_cut_bound(D: VaryingData, W_Q: np.ndarray, w: np.ndarray, F: np.ndarray, memo: dict) -> float:
    """`shift_moment.cut_rows` of the cut (w, F) on the keys' rows, kept in memo by the cut's bytes."""
    key = ("cut", np.asarray(w, dtype=np.float64).tobytes(), np.asarray(F, dtype=np.float64).tobytes())
    if key not in memo:
        if "row_err" not in memo:
            memo["row_err"] = row_err(D, W_Q)
        memo[key] = cut_rows(D.Vt[:D.n - 1], W_Q, w, F, D.norm, memo["row_err"])
    return memo[key]


def _budgets(D: VaryingData, W_Q: np.ndarray, S: np.ndarray) -> np.ndarray:
    """Lambda_S per row of S: the pairs by `query_budget`'s bound (two rows each), the all-keys row by
    `all_keys_budget`; each inflated by the float rows' error against W_Q kq_j."""
    from attncert.certify.second_order.varying_query.program import query_budget

    m = D.n - 1
    Vt = D.Vt[:m]
    err = row_err(D, W_Q)
    out = np.empty(S.shape[0])
    small = S[:-1]
    if small.shape[0]:
        out[:-1] = query_budget(Vt, D.norm, small) + 3.0 * (small @ err)
    out[-1] = all_keys_budget(Vt, D.norm, err)
    return np.minimum(out, S.sum(axis=1))


def key_lead(D: VaryingData) -> np.ndarray:
    """Per key the factor of its normalized query shift: etahat_j = key_lead_j kq_j . Y / tau."""
    m = D.n - 1
    return np.where(D.active[:m, 2] > 0, D.radius / D.scales[:m, 2], 0.0)


def shift_cut_data(shift_cuts, m: int, dh: int) -> list:
    """The (w, F) pairs as float arrays of shapes (m,), (dh, dh), w clipped at 0; ValueError if one is malformed."""
    out = []
    for w, F in shift_cuts:
        w, F = np.ascontiguousarray(w, dtype=np.float64), np.ascontiguousarray(F, dtype=np.float64)
        if w.shape != (m,) or F.shape != (dh, dh) or not (np.all(np.isfinite(w)) and np.all(np.isfinite(F))):
            raise ValueError(f"a shift cut needs finite weights of shape ({m},) and F of shape ({dh}, {dh})")
        out.append((np.clip(w, 0.0, None), F))
    return out


def row_err(D: VaryingData, W_Q: np.ndarray) -> np.ndarray:
    """Per key a bound on |etahat_j - Vt_j . x| over the query set: the float row Vt_j against the program's
    functional lead_j kq_j . (W_Q^T x)."""
    m = D.n - 1
    lead = key_lead(D)
    absq = np.abs(W_Q)
    return lead * np.array([np.abs(absq @ np.abs(D.kq[j])).sum() if D.norm == "linf"
                            else np.linalg.norm(absq @ np.abs(D.kq[j])) for j in range(m)]) * gamma(W_Q.shape[1] + 4)


def _facet_rows(R: _Assembly, D: VaryingData, edges: list, offsets: dict, m: int, chains: tuple):
    """U_j in lam_j P_j and V_j in (base_j - lam_j) P_j through each token's selected half-planes (ragged); chains:
    `long_chains(D)`, built once per program for these rows and the support cuts."""
    keys, query = chains
    rows_k = chain_rows(keys, D.scales[0, 0], D.rho_w)
    rows_q = chain_rows(query, D.scales[-1, 0], D.rho_w)
    tok = np.concatenate([np.full(e.size, j) for j, e in enumerate(edges)])
    idx = np.concatenate(edges).astype(np.int64)
    pick = lambda rows: rows[np.minimum(idx, rows.size - 1)]  # noqa: E731 - the half-plane of each (token, index)
    hs, hw, hb = (np.where(tok < m, pick(rk), pick(rq)) for rk, rq in zip(rows_k, rows_q))
    base_col = np.where(tok < m, offsets["bt"] + np.minimum(tok, m - 1), 0)
    lam, us, uw = offsets["lam"] + tok, offsets["Us"] + tok, offsets["Uw"] + tok
    vs, vw = offsets["Vs"] + tok, offsets["Vw"] + tok
    R.add("nonneg", tok.size, [[("cols", np.stack([lam, us, uw], 1), np.stack([hb, -hs, -hw], 1))]])
    R.add("nonneg", tok.size, [[("cols", np.stack([base_col, lam, vs, vw], 1), np.stack([hb, -hb, -hs, -hw], 1))]])


def _box(D: VaryingData, W_Q: np.ndarray, offsets: dict, nvar: int, tau_lo: float, tau_hi: float, Hf: np.ndarray,
         second: bool) -> tuple[np.ndarray, np.ndarray]:
    """A box holding every lifted true point (`varying_query.program.factored_box`, and Y = W_Q^T W:
    |Y_k| <= tau ||W_Q[:, k]||_1 (box) or ||W_Q[:, k]||_2 (ball), rounded up)."""
    m, d, inflate = D.n - 1, D.d, 1.0 + 1e-9
    t = tau_hi * inflate
    bt_hi = tau_hi * np.exp(2.0 * Hf[:m]) * (1.0 + 1e-12) * inflate
    base_hi = np.concatenate([bt_hi, [t]])
    unit = np.where(D.active[:, [0, 1, 3]] > 0, 1.0, 0.0) * inflate
    lo, hi = np.zeros(nvar), np.zeros(nvar)

    def put(name, a, b):
        o = offsets[name]
        size = np.size(b)
        lo[o:o + size], hi[o:o + size] = a, b

    col = np.abs(W_Q).sum(axis=0) if D.norm == "linf" else np.sqrt((W_Q * W_Q).sum(axis=0))
    col = col * (1.0 + gamma(d + 4)) * inflate + 1e-300
    put("tau", tau_lo, tau_hi)
    put("W", -t, np.full(d, t))
    put("Y", -t * col, t * col)
    put("mu", 0.0, np.full(m, t))
    put("bt", tau_lo * (1.0 - 1e-9), bt_hi)
    put("eta", -t, np.full(m, t))
    put("Q", 0.0, np.full(m, t if second else 0.0))
    put("lam", 0.0, base_hi)
    for j, (u, v) in enumerate((("Us", "Vs"), ("Uw", "Vw"), ("Ub", "Vb"))):
        put(u, -unit[:, j] * base_hi, unit[:, j] * base_hi)
        put(v, -unit[:, j] * base_hi, unit[:, j] * base_hi)
    put("SU", -base_hi, base_hi)
    put("SV", -base_hi, base_hi)
    return lo, hi
