"""Moment cuts of the query's shift: one direction of the d_h x d_h moment matrix of Y, as a second-order cone.

The query perturbation reaches the keys only through Y = W_Q^T W (`long_program`), W = tau x with x in the unit
ball (l2) or box (linf). A lifted point has per key the tau-scaled moments eta_j = tau etahat_j and Q_j >= eta_j^2 /
tau of etahat_j = v_j . x (v_j = `VaryingData.Vt` row j), and the relaxation may spread them as a mixture of
shifts would: each key's second moment is bounded only by itself and by the budgets of `long_program`. The moment
matrix Z = tau E[x x^T] of one shared shift ties them together. Its projection on weights w >= 0 with any matrix F
(d_h x d_h) is the cut

    tau sum_j w_j Q_j + ||F Y||^2  <=  Lambda' tau^2,
    Lambda' >= max_x  sum_j w_j (v_j . x)^2 + ||F W_Q^T x||^2,                                             (S)

valid at every true point (Q_j = tau (v_j . x)^2, Y = tau W_Q^T x): the left side is tau^2 times the maximized
form. With s = Lambda' tau - sum_j w_j Q_j it is the rotated cone s tau >= ||F Y||^2, s >= 0, i.e. the second-order
cone ||(2 F Y, s - tau)|| <= s + tau. F only decides how tight the cut is; the S-lemma choice
F^T F = Lambda G^{-1} - K_w (K_w the keys' form in Y, G the metric of the query set in Y: W_Q^T W_Q for the ball,
W_Q^T diag(1/g) W_Q for the box's ellipsoid sum_k g_k x_k^2 <= sum_k g_k) makes (S) the exact projection of the
moment-matrix constraint on w for the ball: a weighted budget on the second moments that also charges the first
moments spent in the cheap directions of the shift. Lambda' is computed, rounded up, from w and F by
`cut_bound`, so a checker that rebuilds the program from the stored (w, F) recomputes it (no trust in the file).
"""
from __future__ import annotations

import numpy as np

from attncert.certify.second_order.varying_query.box_scaling import box_scalings, column_norms
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

_U = UNIT_ROUNDOFF


def cut_bound(B: np.ndarray, norm: str, row_err: np.ndarray) -> float:
    """Lambda' >= max_x ||B x + e(x)||^2 over the unit ball (l2) or box (linf), for float rows B (k x d) whose exact
    functionals differ from B x by |e_i| <= row_err_i at every such x.

    Ball: ||B x||^2 <= lambda_max(B B^T). Box: for g > 0, ||B x||^2 <= lambda_max(B diag(1/g) B^T) sum_k g_k x_k^2
    <= lambda_max(.) sum_k g_k, the smaller over the scalings of `box_scaling.box_scalings`. The eigenvalue of the
    smaller Gram matrix (same nonzero spectrum), plus 64 u (k + d + 10) trace for its rounding, inflated by 1e-9;
    then ||Bx + e|| <= ||Bx|| + ||e||."""
    B = np.asarray(B, dtype=np.float64)
    k, d = B.shape
    best = np.inf
    for g in (box_scalings(B) if norm == "linf" else [None]):
        Bs, scale = (B, 1.0) if g is None else (B / np.sqrt(g), float(np.sum(g)) * (1.0 + gamma(d + 2)))
        G = Bs @ Bs.T if k <= d else Bs.T @ Bs
        tr = float(np.trace(G))
        lam = max(float(np.linalg.eigvalsh(G)[-1]), 0.0) + 64.0 * _U * (k + d + 10) * tr
        best = min(best, lam * scale)
    root = np.sqrt(best * (1.0 + 1e-9)) + float(np.sqrt(np.sum(np.square(row_err)))) * (1.0 + 1e-9)
    return float(root * root * (1.0 + 1e-9) + 1e-300)


def cut_rows(Vt: np.ndarray, W_Q: np.ndarray, w: np.ndarray, F: np.ndarray, norm: str,
             row_err: np.ndarray) -> float:
    """Lambda' of (S) for weights w (keys), F (d_h x d_h): `cut_bound` of the rows sqrt(w_j) v_j and F W_Q^T.
    row_err_j bounds |etahat_j - v_j . x| (the float rows against the program's functional); the rows of F W_Q^T
    are rounded products of the program's exact F (W_Q^T x): gamma_{d_h + 2} (|F| |W_Q|^T) per row."""
    w = np.clip(np.asarray(w, dtype=np.float64), 0.0, None)
    FW = F @ W_Q.T
    absFW = np.abs(F) @ np.abs(W_Q).T
    err_F = gamma(W_Q.shape[1] + 2) * (absFW.sum(axis=1) if norm == "linf" else np.sqrt((absFW * absFW).sum(axis=1)))
    B = np.vstack([np.sqrt(w)[:, None] * Vt, FW])
    return cut_bound(B, norm, np.concatenate([np.sqrt(w) * row_err, err_F]))


def s_lemma_factor(Vt: np.ndarray, W_Q: np.ndarray, w: np.ndarray, kq_lead: np.ndarray, norm: str) -> np.ndarray:
    """F with F^T F = Lambda G^{-1} - K_w (module docstring), in floating point (any F gives a valid cut).

    K_w = sum_j w_j a_j a_j^T with a_j = kq_lead_j (key j's functional of Y: etahat_j = a_j . Y / tau); G = W_Q^T
    W_Q (ball) or W_Q^T diag(1/g) W_Q (box, g the column norms of the rows sqrt(w_j) v_j). With G = R^T R and
    R K_w R^T = U diag(kappa) U^T: F = diag(sqrt(kappa_max - kappa)) U^T R^{-T}."""
    w = np.clip(np.asarray(w, dtype=np.float64), 0.0, None)
    dh = W_Q.shape[1]
    if norm == "linf":
        rows = np.sqrt(w)[:, None] * Vt
        g = column_norms(rows)
        G = W_Q.T @ (W_Q / g[:, None])
    else:
        G = W_Q.T @ W_Q
    G = 0.5 * (G + G.T) + 1e-12 * max(float(np.trace(G)), 1e-300) / dh * np.eye(dh)
    try:
        R = np.linalg.cholesky(G).T  # G = R^T R
    except np.linalg.LinAlgError:
        return np.zeros((dh, dh))
    K = (kq_lead * w[:, None]).T @ kq_lead
    M = R @ K @ R.T
    kappa, U = np.linalg.eigh(0.5 * (M + M.T))
    root = np.sqrt(np.clip(kappa[-1] - kappa, 0.0, None))
    Rinv_T = np.linalg.solve(R.T, np.eye(dh))  # R^{-T}
    return (root[:, None] * U.T) @ Rinv_T


def plain_cut_bound(w: np.ndarray, F: np.ndarray, W_Q: np.ndarray, norm: str) -> float:
    """sum_j w_j + ||F||_F^2 sum_k c_k^2 >= max_x sum_j w_j etahat_j^2 + ||F W_Q^T x||^2, c_k >= |(W_Q^T x)_k| (the
    column norms of W_Q dual to the query set), rounded up; numpy reductions only (no BLAS)."""
    col = np.abs(W_Q).sum(axis=0) if norm == "linf" else np.sqrt((W_Q * W_Q).sum(axis=0))
    col = col * (1.0 + gamma(W_Q.shape[0] + 4))
    val = float(np.sum(w)) + float(np.sum(F * F)) * float(np.sum(col * col))
    return val * (1.0 + gamma(F.size + w.size + col.size + 8)) + 1e-300
