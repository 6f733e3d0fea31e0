"""The affine enclosures of the block map re-derived from the extracted weights, in numpy: the audit's own
implementation of `block/enclosure.py` (the same mathematics, written again without torch, so that a file's pieces
are never taken on trust), and the centre Hessian of `block/certificate.py`.

Every intermediate vector v of the block map over ||xi||_inf <= rho is an affine form v(xi) = c + J xi + R nu + err
(one noise symbol per scalar nonlinear node, |nu_n| <= eps_n(rho); |err| <= cerr + jerr max(rho, max eps)), and its
Jacobian along ||u||_inf <= 1 is J u + R beta + err' (|beta_n| <= b_n(rho)). Per entry

    e(rho) = |R| eps + rounding,   a(rho) = |R| b + rounding,
    unary phi(z): eps = 1/2 M2 w^2 + |phi'(c)| e_round + ...,  b = M2 w (s + a) + ...  (exp, 1/z, z^(-1/2): the
                  exact end-point linearization error and slope change where smaller, block_curves)
    product x y:  eps = w_x w_y + ...,                          b = (s_x + a_x) w_y + w_x (s_y + a_y) + ...

with s = ||J||_1, w = s rho + e and M2 from `block_curves`. The output g = C F gives c, J (g(0) and grad g(0) as
floats, within e0 = e(0) and a0 = a(0) of the exact values) and, in its R columns, the centre adjoints lambda_n;
`centre_hessian` is H0 = sum_n lambda_n phi_n''(z_n) j_n j_n^T + the products' terms (float) with its rounding
bound. The enclosure records its nonlinear nodes in order; the cubic Taylor model walks them again
(`block_taylor_model`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncert.audit.block_curves import (CURVES, FN_ULPS, U, inflate, range_bounds, slope_change_at_ends,
                                         taylor_excess_at_ends)
from attncert.head.rounding import gamma


@dataclass
class Var:
    c: np.ndarray
    J: np.ndarray
    R: np.ndarray
    cerr: np.ndarray
    jerr: np.ndarray
    e: np.ndarray = None
    a: np.ndarray = None
    s: np.ndarray = None
    rowabs: np.ndarray = None
    floor: float | None = None
    jerrJ: np.ndarray = None   # the l1 rounding of J's row alone (<= jerr): |err| <= cerr + jerrJ rho + jerr max eps


@dataclass
class Node:
    kind: str                  # "unary" or "product"
    out: Var
    inputs: tuple
    cols: tuple
    curve: str | None = None


def _pad(R, n):
    return R if R.shape[1] == n else np.concatenate([R, np.zeros((R.shape[0], n - R.shape[1]))], 1)


class Enclosure:
    """The affine enclosures of one graph over the radii rho (B,)."""

    def __init__(self, d: int, rho: np.ndarray):
        self.d, self.rho, self.B = d, np.asarray(rho, dtype=np.float64), len(rho)
        self.eps = np.zeros((self.B, 0))
        self.beta = np.zeros((self.B, 0))
        self.nodes: list[Node] = []
        self.bilinear_groups: list = []    # (query-key product node index, heads, head width) per score product

    def _maxes(self):
        n = self.eps.shape[1]
        emax = np.maximum(self.rho, self.eps.max(-1) if n else 0.0)
        bmax = np.maximum(self.beta.max(-1) if n else np.zeros(self.B), 1.0)
        return emax[:, None], bmax[:, None]

    def _finish(self, v: Var) -> Var:
        v.s = inflate(np.abs(v.J).sum(-1))
        absR = np.abs(v.R)
        v.rowabs = inflate(v.s + absR.sum(-1))
        emax, bmax = self._maxes()
        n = v.R.shape[1]
        v.e = inflate(self.eps[:, :n] @ absR.T + v.cerr + v.jerr * emax)
        v.a = inflate(self.beta[:, :n] @ absR.T + v.jerr * bmax)
        return v

    def width(self, v: Var):
        return inflate(v.s[None, :] * self.rho[:, None] + v.e)

    def zerr(self, v: Var):
        emax, bmax = self._maxes()
        return inflate(v.cerr + v.jerr * emax), inflate(v.jerr * bmax)

    def input(self, x0) -> Var:
        N = x0.shape[0]
        return self._finish(Var(x0.copy(), np.eye(N), np.zeros((N, 0)), np.zeros(N), np.zeros(N), jerrJ=np.zeros(N)))

    def linear(self, terms: list, bias=None) -> Var:
        """sum_i v_i W_i + bias (W_i (N_i, N_out))."""
        n = self.eps.shape[1]
        g = gamma(sum(W.shape[0] for _, W in terms) + 2)
        c = sum(v.c @ W for v, W in terms)
        J = sum(W.T @ v.J for v, W in terms)
        R = sum(W.T @ _pad(v.R, n) for v, W in terms)
        absc = sum(np.abs(v.c) @ np.abs(W) for v, W in terms)
        if bias is not None:
            c, absc = c + bias, absc + np.abs(bias)
        cerr = inflate(sum(v.cerr @ np.abs(W) for v, W in terms) + g * absc)
        jerr = inflate(sum((v.jerr + g * v.rowabs) @ np.abs(W) for v, W in terms))
        jerrJ = inflate(sum((v.jerrJ + g * v.s) @ np.abs(W) for v, W in terms))
        return self._finish(Var(c, J, R, cerr, jerr, jerrJ=jerrJ))

    def _node(self, c, J, R_old, jerr, jerrJ, eps, beta, kind, inputs, curve=None) -> Var:
        N, n0 = c.shape[0], self.eps.shape[1]
        self.eps = np.concatenate([self.eps, inflate(eps)], 1)
        self.beta = np.concatenate([self.beta, inflate(beta)], 1)
        R = np.concatenate([_pad(R_old, n0), np.eye(N)], 1)
        out = self._finish(Var(c, J, R, np.zeros(N), inflate(jerr), jerrJ=inflate(jerrJ)))
        self.nodes.append(Node(kind, out, inputs, (n0, n0 + N), curve))
        return out

    def unary(self, z: Var, curve: str, floor: float | None = None) -> Var:
        z.floor = floor
        f, d1f = CURVES[curve][0], CURVES[curve][1]
        w = self.width(z)
        M2 = range_bounds(curve, z.c, w, floor)
        d1, c = d1f(z.c), f(z.c)
        ad1 = np.abs(d1)
        ze, za = self.zerr(z)
        lin, slope = 0.5 * M2 * w * w, M2 * w      # linearization error and slope change over the range
        ends = taylor_excess_at_ends(curve, z.c, w, floor, 1)
        if ends is not None:
            lin = np.minimum(lin, ends)
            slope = np.minimum(slope, slope_change_at_ends(curve, z.c, w, floor))
        eps = lin + ad1 * ze + FN_ULPS * U * np.abs(c)
        beta = ad1 * za + slope * (z.s + z.a)
        jerr = ad1 * z.jerr + (FN_ULPS + 2) * U * ad1 * z.rowabs
        jerrJ = ad1 * z.jerrJ + (FN_ULPS + 2) * U * ad1 * z.s
        return self._node(c, d1[:, None] * z.J, d1[:, None] * z.R, jerr, jerrJ, eps, beta, "unary", (z,), curve)

    def product(self, x: Var, y: Var) -> Var:
        n = self.eps.shape[1]
        wx, wy = self.width(x), self.width(y)
        (xe, xa), (ye, ya) = self.zerr(x), self.zerr(y)
        c = x.c * y.c
        acx, acy = np.abs(x.c), np.abs(y.c)
        J = y.c[:, None] * x.J + x.c[:, None] * y.J
        R = y.c[:, None] * _pad(x.R, n) + x.c[:, None] * _pad(y.R, n)
        eps = wx * wy + acy * xe + acx * ye + U * np.abs(c)
        beta = acy * xa + acx * ya + (x.s + x.a) * wy + wx * (y.s + y.a)
        jerr = acy * x.jerr + acx * y.jerr + 3 * U * (acy * x.rowabs + acx * y.rowabs)
        jerrJ = acy * x.jerrJ + acx * y.jerrJ + 3 * U * (acy * x.s + acx * y.s)
        return self._node(c, J, R, jerr, jerrJ, eps, beta, "product", (x, y))


def centre_hessian(enc: Enclosure, lam0: list):
    """(H0 (m, d, d) float, a bound on max_{||u||_inf <= 1} |u^T (H0 - H_exact) u| (m,))."""
    H, absum, count = 0.0, 0.0, 0
    for nd, l0 in zip(enc.nodes, lam0):
        if nd.kind == "unary":
            z = nd.inputs[0]
            A = l0 * CURVES[nd.curve][2](z.c)
            term = np.matmul((A[:, :, None] * z.J[None]).transpose(0, 2, 1), z.J)
            ab = (np.abs(A) * z.s ** 2).sum(-1) * (1.0 + FN_ULPS * U)
        else:
            x, y = nd.inputs
            half = np.matmul((l0[:, :, None] * x.J[None]).transpose(0, 2, 1), y.J)
            term = half + half.transpose(0, 2, 1)
            ab = 2.0 * (np.abs(l0) * x.s * y.s).sum(-1)
        count += l0.shape[1]
        H, absum = H + term, absum + ab
    H = 0.5 * (H + H.transpose(0, 2, 1))
    return H, inflate(gamma(count + 16) * absum)


def quadratic_part_box(enc: Enclosure, Rv: np.ndarray) -> np.ndarray:
    """(rows,) with rho^2 times it bounding |sum_k R_vk Q_k(delta)| over the box: 1/2 (sum_ij |H_v,ij| + rounding),
    H_v the rows' centre Hessian over the nodes whose columns Rv has (block/centre_hessian.py)."""
    n = Rv.shape[1]
    lam = [Rv[:, nd.cols[0]:nd.cols[1]] for nd in enc.nodes if nd.cols[1] <= n]
    if not lam:
        return np.zeros(Rv.shape[0])
    H, rounding = centre_hessian(enc, lam)
    return inflate(0.5 * inflate(inflate(np.abs(H).sum((-1, -2))) + rounding))
