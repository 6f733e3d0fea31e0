"""The cubic Taylor model of the block map, re-derived by the audit in numpy over its own affine enclosure
(`block_enclosure.Enclosure`): the audit's implementation of `block/taylor_model.py`, whose docstring states the
mathematics (the same inequalities, written again without torch).

In short, with lambda_n = R_g[:, n] the centre adjoints of g = C F, every node input split as Delta = p + h + t + e
(p = j . delta; h, t, e its quadratic, cubic and rest parts through the nodes' R rows) and

    kappa_k = sum_{unary n} lambda_n phi''(c_n) R_{n k} j_n
              + sum_{product n} lambda_n (R_{y_n k} j_{x_n} + R_{x_n k} j_{y_n}),

    g(delta) - g(0) - grad g(0) . delta - 1/2 delta^T H0 delta = cubic + rest,
    |cubic| <= rho^3 u^T P u,   P = sum_n c_n j_n j_n^T  (u = delta / rho),
    c_n = 1/2 |phi''(c_n)| ||kappa_n||_1 + |lambda_n| |phi'''(c_n)| s_n / 6        (unary n, on its input's j)
          1/2 ||kappa_n||_1 t_n,  1/2 ||kappa_n||_1 / t_n,  t_n = s_y / s_x         (product n, on j_x and j_y),
    +-rest <= sum_n |lambda_n| own_n + sum_k (Cmax_k + Rest_k) rho ||kappa_k||_1 + jerr_g max |nu|,

own_n a node's fourth-order terms without p (t + e) (those sum, signed, to sum_k (Cu_k + Rest_k)(kappa_k . delta): the
"moved" term), with its rounding terms; a product with a broadcast factor (identical rows of one input: LayerNorm's
1/sigma, the softmax's 1/sum, the query's own attention weight) keeps the common factor out of its quadratic part
(one l1 norm per group, `shared_factor_sum`) and bounds its output term (Delta_x - p_x)(Delta_y - p_y) through the
lambda-weighted rows of R_x. Every bound is a float sum of nonnegative terms raised by `inflate`; an infinite piece
(a singularity reached over the box) stays +inf (NaN, from 0 * inf or inf - inf, reads as +inf). The rest is bounded
per sense s = +-1: a unary node's 1/2 phi''(c) (Delta - p)^2 enters with the weight (s lambda phi''(c))^+ (plus the
float phi''s error), and for exp, 1/z and z^(-1/2) the excess phi - T3 >= 0 with (s lambda)^+; the rest of own_n with
|lambda_n|.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attncert.audit.block_curves import (CURVES, FN_ULPS, U, fourth_bound, inflate, taylor_excess_at_ends,
                                         third_derivative)
from attncert.audit.block_enclosure import Enclosure, Var, quadratic_part_box
from attncert.audit.block_grouped_quadratic import score_groups
from attncert.head.rounding import gamma

HESSIAN_ROWS = 16          # quadratic parts of at most this many rows also bounded through their centre Hessians
HESSIAN_ROWS_WIDE = 1      # ... at widths d > 512 (the stage's `hessian_row_limit`: formed Hessians cost ~d^3)
KAPPA_COLUMNS = 512        # columns of kappa formed at once (memory: KAPPA_COLUMNS x d floats)


@dataclass
class CubicModel:
    P: np.ndarray              # (m, d, d) float, the cubic part's form (rows with a non-finite coefficient: zeros)
    P_rounding: np.ndarray     # (m,) bound on max_u |u^T (P - P_exact) u| over the box
    P_finite: np.ndarray       # (m,) bool
    rest: np.ndarray           # (2, B, m) per sense (+g, -g): bound on the rest over ||delta||_inf <= rho_b
                               # and the output's rounding beyond e0 + a0 rho (+inf where not bounded)


def _padded(R: np.ndarray, n: int) -> np.ndarray:
    return R if R.shape[1] == n else np.concatenate([R, np.zeros((R.shape[0], n - R.shape[1]))], 1)


def _inf_for_nan(x):
    """NaN read as +inf; +inf stays +inf (numpy's nan_to_num would make it the largest float: a finite number)."""
    return np.where(np.isnan(x), math.inf, x)


def kappa_norms(enc: Enclosure, lam: np.ndarray) -> np.ndarray:
    """(m, n_nodes) upper bounds on ||kappa_k||_1, kappa formed exactly as a float sum in blocks of columns, plus
    the sum's rounding (and phi''(c)'s evaluation error) bounded by gamma sum_i |w_i| s_i |R_ik|."""
    m, n_nodes = lam.shape
    terms = []                                  # (w (m, N), R (N, n), J (N, d), s (N,)): kappa_k += sum_i w_i R_ik J_i
    for nd in enc.nodes:
        lam_n = lam[:, nd.cols[0]:nd.cols[1]]
        if nd.kind == "unary":
            (z,) = nd.inputs
            terms.append((lam_n * CURVES[nd.curve][2](z.c), z.R, z.J, z.s))
        else:
            x, y = nd.inputs
            terms += [(lam_n, y.R, x.J, x.s), (lam_n, x.R, y.J, y.s)]
    norms = np.zeros((m, n_nodes))
    for h in range(m):
        weighted = [(R, w[h][:, None] * J) for w, R, J, _ in terms]
        for lo in range(0, n_nodes, KAPPA_COLUMNS):
            hi = min(lo + KAPPA_COLUMNS, n_nodes)
            kappa = np.zeros((hi - lo, enc.d))
            for R, WJ in weighted:
                top = min(hi, R.shape[1])
                if top > lo:
                    kappa[:top - lo] += R[:, lo:top].T @ WJ
            norms[h, lo:hi] = np.abs(kappa).sum(-1)
    err = np.zeros((m, n_nodes))
    for w, R, _, s in terms:
        err[:, :R.shape[1]] += (np.abs(w) * s) @ np.abs(R)
    g = gamma(sum(R.shape[0] for _, R, _, _ in terms) + enc.d + 16) + FN_ULPS * U
    return inflate(inflate(norms) + 2.0 * inflate(g * err))


def broadcast_groups(v: Var) -> list | None:
    """The groups (index arrays, by first index) of identical rows of v (value, Jacobian, noise and rounding rows)
    when v has fewer distinct rows than entries (a broadcast); else None."""
    rows = np.concatenate([v.c[:, None], v.J, v.R, v.cerr[:, None], v.jerr[:, None]], 1)
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    if len(first) == rows.shape[0]:
        return None
    inverse = np.asarray(inverse).reshape(-1)
    return [np.flatnonzero(inverse == g) for g in np.argsort(first)]


def factored_products(enc: Enclosure) -> dict:
    """Node index -> (groups, which) for the product nodes with a broadcast input (which: its position, the second
    input looked at first)."""
    out = {}
    for i, nd in enumerate(enc.nodes):
        if nd.kind != "product":
            continue
        for which in (1, 0):
            groups = broadcast_groups(nd.inputs[which])
            if groups is not None:
                out[i] = (groups, which)
                break
    return out


class _Walk:
    """The per-node magnitudes over the radii (B, n_nodes): Q, Cu, Rest bound the nodes' quadratic, cubic and rest
    pieces, Q_plain is Q without the factored products' columns, numax bounds |nu|; filled node by node."""

    def __init__(self, enc: Enclosure):
        self.enc = enc
        B, n = enc.B, enc.eps.shape[1]
        self.Q, self.Cu, self.Rest, self.Q_plain, self.numax = (np.zeros((B, n)) for _ in range(5))
        self.r1 = enc.rho[:, None]
        self.r2 = inflate(enc.rho * enc.rho)[:, None]
        self.factored = factored_products(enc)
        self.bilinears = score_groups(enc)
        self.in_group = {bg.node for bg in self.bilinears}
        # a unary node's quadratic piece 1/2 phi''(c) p^2 has the sign of phi''(c): summed with signs (`quadratic`)
        self.signs = {i: np.sign(CURVES[nd.curve][2](nd.inputs[0].c)) for i, nd in enumerate(enc.nodes)
                      if nd.kind == "unary"}

    def rounding(self, v) -> np.ndarray:
        """(B, N) bound on |err_v|: cerr + jerrJ rho + jerr max |nu| over the nodes so far."""
        return inflate(v.cerr[None, :] + v.jerrJ[None, :] * self.r1 + v.jerr[None, :] * self.numax.max(-1)[:, None])

    def shared_factor_sum(self, Rv: np.ndarray, i: int) -> np.ndarray:
        """(rows,) with rho^2 times it bounding |sum_n R_vn p_xn p_yg(n)| over the factored product node i: the sum over
        its groups g of s_yg ||sum_{n in g} R_vn j_xn||_1, plus the rounding of the inner sums."""
        nd = self.enc.nodes[i]
        groups, which = self.factored[i]
        x, y = (nd.inputs[0], nd.inputs[1]) if which == 1 else (nd.inputs[1], nd.inputs[0])
        lo = nd.cols[0]
        total = np.zeros(Rv.shape[0])
        err = np.zeros(Rv.shape[0])
        for idx in groups:
            Rg = Rv[:, lo + idx]
            sy = y.s[idx[0]]
            total += sy * np.abs(Rg @ x.J[idx]).sum(-1)
            err += sy * (np.abs(Rg) @ x.s[idx])
        return inflate(inflate(total) + gamma(x.J.shape[0] + self.enc.d + 4) * err)

    def quadratic(self, Rv: np.ndarray) -> np.ndarray:
        """(B, rows) bound on |Rv Q| (the quadratic part of the rows' values): the unary nodes' pieces with the signs
        of phi'' (max of the positive and the negative sums), factored products' columns signed, a head's query-key
        products as one form where smaller, at most HESSIAN_ROWS rows through their formed centre Hessians too."""
        n = Rv.shape[1]
        Hv = self.Q_plain[:, :n] @ np.abs(Rv).T
        for i, sgn in self.signs.items():
            lo, hi = self.enc.nodes[i].cols
            if hi <= n:
                Rs = Rv[:, lo:hi] * sgn
                q = self.Q[:, lo:hi]
                slack = (2 * FN_ULPS * U) * (q @ np.abs(Rv[:, lo:hi]).T)
                Hv = Hv + inflate(np.maximum(q @ np.maximum(Rs, 0.0).T, q @ np.maximum(-Rs, 0.0).T) + slack)
        for i in self.factored:
            if self.enc.nodes[i].cols[1] <= n and i not in self.in_group:
                Hv = Hv + self.r2 * self.shared_factor_sum(Rv, i)[None, :]
        for bg in self.bilinears:
            if bg.cols[1] <= n:
                lo, hi = bg.cols
                Hv = Hv + np.minimum(self.Q[:, lo:hi] @ np.abs(Rv[:, lo:hi]).T, bg.bound(Rv, self.Q, self.r2))
        if Rv.shape[0] <= (HESSIAN_ROWS if self.enc.d <= 512 else HESSIAN_ROWS_WIDE):   # few rows: formed Hessians
            Hv = np.minimum(Hv, self.r2 * quadratic_part_box(self.enc, Rv)[None, :])
        return inflate(Hv)

    def parts(self, v: Var):
        """(H, T, E, D1, w) of a node input v: bounds on |h|, |t|, |e| (its rounding included), |Delta - p|, |Delta|."""
        n = v.R.shape[1]
        absRT = np.abs(v.R).T
        H = self.quadratic(v.R)
        T = inflate(self.Cu[:, :n] @ absRT)
        E = inflate(self.Rest[:, :n] @ absRT + self.rounding(v))
        D1 = np.minimum(inflate(H + T + E), v.e)
        w = np.minimum(inflate(v.s[None, :] * self.r1 + D1), self.enc.width(v))
        return H, T, E, D1, w


def _unary(walk: _Walk, nd, lam_n, kn_n):
    """(q, cu, rest, output term (2, B, m) per sense, P pairs) of a unary node."""
    (z,) = nd.inputs
    H, T, E, D1, w = walk.parts(z)
    sp = inflate(z.s[None, :] * walk.r1)                               # |p|
    d2 = np.abs(CURVES[nd.curve][2](z.c)) * (1 + FN_ULPS * U)
    d3 = third_derivative(nd.curve, z.c)
    m4 = inflate(fourth_bound(nd.curve, z.c, w, z.floor) * w ** 4 / 24.0)   # |phi(z) - T3(z)|
    ends = taylor_excess_at_ends(nd.curve, z.c, w, z.floor, 3)
    m4 = m4 if ends is None else np.minimum(m4, ends)
    zr = walk.rounding(z)                                              # the input's rounding
    rnd = inflate(np.abs(CURVES[nd.curve][1](z.c)) * (1 + FN_ULPS * U) * zr + FN_ULPS * U * np.abs(nd.out.c))
    q = inflate(0.5 * d2 * sp * sp)
    cu = inflate(d2 * sp * H + d3 * sp ** 3 / 6.0)
    own = inflate(0.5 * d2 * D1 * D1 + d2 * sp * zr + d3 * D1 * (w * w + w * sp + sp * sp) / 6.0
                  + m4 + rnd)
    rest = inflate(own + d2 * sp * (T + E))
    coef = inflate(0.5 * d2 * kn_n + np.abs(lam_n) * d3 * z.s / 6.0)
    # the output's share per sense s: 1/2 phi''(c) (Delta - p)^2 has phi''(c)'s sign and, for the convex curves,
    # phi - T3 >= 0 has +'s: only s lambda phi'' > 0 (s lambda > 0) can raise s g
    alam = np.abs(lam_n)
    d2s = CURVES[nd.curve][2](z.c)
    slack = alam * np.abs(d2s) * (2 * FN_ULPS * U)
    convex = ends is not None
    others = inflate(d2 * sp * zr + d3 * D1 * (w * w + w * sp + sp * sp) / 6.0 + (0.0 if convex else m4) + rnd)
    h2 = 0.5 * D1 * D1
    terms = []
    for sign in (1.0, -1.0):
        t = inflate(others @ alam.T) + inflate(h2 @ inflate(np.maximum(sign * lam_n * d2s, 0.0) + slack).T)
        if convex:
            t = t + inflate(m4 @ inflate(np.maximum(sign * lam_n, 0.0)).T)
        terms.append(_inf_for_nan(inflate(t)))
    return q, cu, rest, np.stack(terms), [(coef, z.J)]


def _product(walk: _Walk, i: int, nd, lam_n, kn_n):
    """(q, cu, rest, output term (B, m), P pairs) of a product node."""
    x, y = nd.inputs
    Hx, Tx, Ex, D1x, wx = walk.parts(x)
    Hy, Ty, Ey, D1y, wy = walk.parts(y)
    px, py = inflate(x.s[None, :] * walk.r1), inflate(y.s[None, :] * walk.r1)
    xr, yr = walk.rounding(x), walk.rounding(y)
    rnd = inflate(np.abs(y.c) * xr + np.abs(x.c) * yr + U * np.abs(nd.out.c))
    q = inflate(px * py)
    cu = inflate(px * Hy + Hx * py)
    own = inflate(px * yr + xr * py + D1x * D1y + rnd)
    rest = inflate(own + inflate(px * (Ty + Ey) + (Tx + Ex) * py))
    alam = np.abs(lam_n)
    if i not in walk.factored:
        out_term = inflate(own @ alam.T)
    else:
        # sum_n lambda_n (Delta_x - p_x)_n (Delta_y - p_y)_g(n): per group the common factor times
        # |sum_{n in g} lambda_n (Delta_x - p_x)_n| = |w . (Q + Cu + Rest) + rounding|, w = sum_{n in g} lambda_n R_xn
        groups, which = walk.factored[i]
        xv, D1xv, xrv, D1yv = (x, D1x, xr, D1y) if which == 1 else (y, D1y, yr, D1x)
        h2 = np.zeros((walk.enc.B, lam_n.shape[0]))
        for idx in groups:
            lg = lam_n[:, idx]
            wrows = lg @ xv.R[idx]                                         # (m, n_x), float
            werr = gamma(len(idx) + 2) * (np.abs(lg) @ np.abs(xv.R[idx]))  # its rounding
            n = wrows.shape[1]
            aw = np.abs(wrows).T
            signed = inflate(walk.quadratic(wrows) + walk.Cu[:, :n] @ aw + walk.Rest[:, :n] @ aw
                             + (walk.Q[:, :n] + walk.Cu[:, :n] + walk.Rest[:, :n]) @ werr.T
                             + xrv[:, idx] @ np.abs(lg).T)
            plain = inflate(D1xv[:, idx] @ np.abs(lg).T)
            h2 += inflate(D1yv[:, idx[0]][:, None] * np.minimum(signed, plain))
        out_term = inflate(inflate(px * yr + xr * py + rnd) @ alam.T + h2)
    t = np.where((x.s > 0) & (y.s > 0), y.s / np.where(x.s > 0, x.s, 1.0), 1.0)
    pairs = [(inflate(0.5 * kn_n * t * (1 + 4 * U)), x.J), (inflate(0.5 * kn_n / t * (1 + 4 * U)), y.J)]
    return q, cu, rest, out_term, pairs


def cubic_model(enc: Enclosure, out: Var) -> CubicModel:
    """The cubic form P, its rounding and the rest over the enclosure's radii for the output g = `out` (module
    docstring; block/taylor_model.py's `cubic_model` with both of its switches on)."""
    n_nodes = enc.eps.shape[1]
    lam = _padded(out.R, n_nodes)
    m, d = lam.shape[0], enc.d
    kn = kappa_norms(enc, lam)
    walk = _Walk(enc)
    own_out = np.zeros((2, enc.B, m))          # per sense (+g, -g)
    pairs = []
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for i, nd in enumerate(enc.nodes):
            lo, hi = nd.cols
            if nd.kind == "unary":
                q, cu, rest, out_term, p = _unary(walk, nd, lam[:, lo:hi], kn[:, lo:hi])
            else:
                q, cu, rest, out_term, p = _product(walk, i, nd, lam[:, lo:hi], kn[:, lo:hi])
            pairs += p
            walk.Q[:, lo:hi], walk.Cu[:, lo:hi] = q, cu
            if i not in walk.factored and i not in walk.in_group and i not in walk.signs:
                walk.Q_plain[:, lo:hi] = q
            walk.Rest[:, lo:hi] = _inf_for_nan(rest)
            own_out = own_out + _inf_for_nan(out_term)
            walk.numax[:, lo:hi] = np.minimum(inflate(q + cu + walk.Rest[:, lo:hi]), enc.eps[:, lo:hi])
        moved = inflate(inflate((walk.Cu + walk.Rest) * walk.r1) @ kn.T)
        rest_out = _inf_for_nan(inflate(own_out + moved + out.jerr[None, :] * walk.numax.max(-1, keepdims=True)))
    P = np.zeros((m, d, d))
    absum = np.zeros(m)
    finite = np.ones(m, dtype=bool)
    for coef, J in pairs:
        ok = np.isfinite(coef).all(-1)
        finite &= ok
        coef = np.where(ok[:, None], coef, 0.0)
        for h in range(m):
            P[h] += (coef[h][:, None] * J).T @ J
        s = np.abs(J).sum(-1)
        absum += (coef * s * s).sum(-1)
    P = 0.5 * (P + P.transpose(0, 2, 1))
    count = sum(J.shape[0] for _, J in pairs)
    return CubicModel(P=P, P_rounding=inflate(gamma(count + 16) * absum), P_finite=finite, rest=rest_out)
