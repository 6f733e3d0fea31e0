"""The diagonally scaled spectral bound on the bilinear form of one head over the unit box (l_inf).

Problem. The varying query's scores carry the bilinear term x M y^T, M = W_Q W_K^T (d x d, rank <= d_h), and
the certificates need

    beta(M) >= max_{||x||_inf, ||y||_inf <= 1} x M y^T        (= ||M||_{inf -> 1}, NP-hard to compute).

Bound. For any positive s, t in R^d (S = diag(s), T = diag(t)), x M y^T = (x S^-1) (S W_Q) (T W_K)^T (T^-1 y^T)
and ||x S^-1||_2 <= ||s^-1||_2 on the box, so

    x M y^T <= phi(s, t) = ||s^-1||_2 ||t^-1||_2 ||(S W_Q) (T W_K)^T||_2      for |x|, |y| <= 1.      (1)

With a = s^-2, b = t^-2 this is sqrt(sum a) sqrt(sum b) ||D_a^-1/2 M D_b^-1/2||_2; s = t = 1 gives d ||M||_2,
and the minimum over a, b is the value of the Grothendieck semidefinite relaxation of ||M||_{inf -> 1} (within
the factor K_G < 1.783 of the truth).

Choosing s, t (floats; `diagonal_scalings`). In the variables la = log a, lb = log b the objective is

    minimize_{la, lb}   1/2 logsumexp(la) + 1/2 logsumexp(lb) + log sigma_1(D_a^-1/2 M D_b^-1/2)      (2)

It is non-smooth where the top singular value is multiple (typically at the optimum), so sigma_1 is replaced by
the Schatten norm ||X||_{S_2p} = (sum_k sigma_k^2p)^(1/2p) >= sigma_1, whose gradient is smooth:

    d/d la_i = 1/2 a_i / sum a - 1/2 sum_k w_k U_ik^2,    w_k = sigma_k^2p / sum_l sigma_l^2p,

(U, V the singular vectors of X; the same in lb with V), minimized by L-BFGS-B for p = `SCHATTEN_ORDERS` in turn
(each from the last one's point, at most `STEPS_PER_ORDER` iterations), la, lb in [-`LOG_RANGE`, `LOG_RANGE`]
(a row of zeros drives its a_i to 0). Every evaluation takes the singular pairs of X = A B^T (A = D_a^-1/2 W_Q,
B = D_b^-1/2 W_K) from the d_h x d_h Gram matrices: with the Cholesky factors R_A^T R_A = A^T A (+ a 1e-13
relative jitter, which moves only the chosen point), A = Q_A R_A, X = Q_A (R_A R_B^T) Q_B^T and U = A R_A^-1 u
for the singular vectors u of the d_h x d_h core: O(d d_h^2), never a d x d matrix. The point
with the smallest value of (2) seen is returned, s = e^{-la/2} scaled by a power of 2 so that ||S W_Q||_F is
near 1 (s and t are free up to a positive factor each; a power of 2 is exact). No randomness: the same weights
give the same s, t on one machine (the float path may differ between BLAS builds; the certified value below holds
for whatever s, t it is given).

Certified value (`scaled_spectral_bound`). (1) is valid for ANY positive finite s, t, so the choice needs no
proof; its evaluation is outward rounded: A = fl(S W_Q) differs from S W_Q by at most 2u |A| entrywise (plus
2^-1075 per underflowed entry), so with f_A >= ||A||_F and e_A = 2u f_A + 1e-300 >= ||S W_Q - A||_F,

    ||(S W_Q)(T W_K)^T||_2 <= `spectral_norm_bound`(A, B) + e_A (f_B + e_B) + f_A e_B,

||s^-1||_2 <= sqrt(sum fl(1/s_i)^2) (1 + gamma_{d+6}) + 1e-150, and the product of the three factors takes a
(1 + gamma_8). `spectral_norm_bound` bounds lambda_max(G_Q G_K) through a Cholesky factor of G_K (plus jitter)
with the rounding term 4 gamma_{d + 3 d_h + 10} tr G_Q tr G_K. Anything non-finite gives +inf (the caller then
keeps the unscaled bounds).
"""
from __future__ import annotations

import math

import numpy as np

from attncert.head.problem import cached_by_weights
from attncert.head.rounding import UNIT_ROUNDOFF, gamma

SCHATTEN_ORDERS = (8, 64, 512)  # p of the smoothed objective, in turn
STEPS_PER_ORDER = 12            # L-BFGS-B iterations per order
LOG_RANGE = 50.0                # |log a_i|, |log b_i| <= LOG_RANGE


def spectral_norm_bound(W_Q: np.ndarray, W_K: np.ndarray) -> float:
    """Upper bound on ||W_Q W_K^T||_2 via lambda_max(L^T G_Q L), G_K + jitter = L L^T, plus rounding."""
    d, dh = W_Q.shape
    GQ, GK = W_Q.T @ W_Q, W_K.T @ W_K
    fQ, fK = np.trace(GQ), np.trace(GK)
    jitter = 1e-12 * fK + 1e-300  # G_K + jitter I >= G_K only increases lambda_max
    L = np.linalg.cholesky(GK + jitter * np.eye(dh))
    lam = float(np.linalg.eigvalsh(L.T @ GQ @ L)[-1])
    lam += 4.0 * gamma(d + 3 * dh + 10) * fQ * fK + 1e-300  # Gram, Cholesky and eigenvalue rounding; underflow
    return float(np.sqrt(max(lam, 0.0))) * (1.0 + 1e-15)


def _inverse_norm(s: np.ndarray) -> float:
    """An upper bound on ||s^-1||_2 (inf if it overflows)."""
    with np.errstate(over="ignore"):
        total = float(np.sum((1.0 / s) ** 2))
    return math.sqrt(total) * (1.0 + gamma(s.size + 6)) + 1e-150


def _frobenius(A: np.ndarray) -> float:
    """An upper bound on ||A||_F (squares that underflow: the 1e-150)."""
    return math.sqrt(float(np.sum(A * A))) * (1.0 + gamma(A.size + 4)) + 1e-150


def scaled_spectral_bound(W_Q: np.ndarray, W_K: np.ndarray, s: np.ndarray, t: np.ndarray) -> float:
    """Certified upper bound on ||s^-1||_2 ||t^-1||_2 ||(S W_Q)(T W_K)^T||_2 >= max_{|x|, |y| <= 1} x W_Q W_K^T y^T
    for the given scalings (module docstring, (1)); +inf unless s, t are positive finite vectors of length d and
    every intermediate is finite."""
    d = W_Q.shape[0]
    s, t = np.asarray(s, dtype=np.float64), np.asarray(t, dtype=np.float64)
    if s.shape != (d,) or t.shape != (d,) or not (np.all(np.isfinite(s)) and np.all(np.isfinite(t))
                                                  and np.all(s > 0) and np.all(t > 0)):
        return math.inf
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        A, B = s[:, None] * W_Q, t[:, None] * W_K
        if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B))):
            return math.inf
        fA, fB = _frobenius(A), _frobenius(B)
        eA, eB = 2.0 * UNIT_ROUNDOFF * fA + 1e-300, 2.0 * UNIT_ROUNDOFF * fB + 1e-300
        try:
            sig = spectral_norm_bound(A, B)
        except np.linalg.LinAlgError:
            return math.inf
        sig = sig + eA * (fB + eB) + fA * eB
        value = _inverse_norm(s) * _inverse_norm(t) * sig * (1.0 + gamma(8))
    return value if math.isfinite(value) else math.inf


def _cholesky_pair(G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R, R^-1) with G + jitter I = R^T R (Cholesky; the jitter, 1e-13 tr G, only moves the optimizer's point)."""
    R = np.linalg.cholesky(G + (1e-13 * float(np.trace(G)) + 1e-300) * np.eye(G.shape[0])).T
    return R, np.linalg.inv(R)


def _objective(x: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray, p: float) -> tuple[float, np.ndarray, float]:
    """(smoothed objective (2) with Schatten order p, its gradient, objective (2) itself) at x = (la, lb)."""
    d = W_Q.shape[0]
    la, lb = x[:d], x[d:]
    A, B = W_Q * np.exp(-la / 2)[:, None], W_K * np.exp(-lb / 2)[:, None]
    Ra, Ia = _cholesky_pair(A.T @ A)
    Rb, Ib = _cholesky_pair(B.T @ B)
    u, sv, vt = np.linalg.svd(Ra @ Rb.T)
    if sv.size == 0 or not sv[0] > 0:
        return 0.0, np.zeros_like(x), -math.inf
    w = (sv / sv[0]) ** (2 * p)
    total = float(w.sum())
    w = w / total
    k = int(np.sum(w > 1e-12))
    U = A @ (Ia @ (u[:, :k] * np.sqrt(w[:k])))  # sqrt(w_k) u_k in R^d
    V = B @ (Ib @ (vt[:k].T * np.sqrt(w[:k])))
    ma, mb = float(la.max()), float(lb.max())
    sa, sb = np.exp(la - ma), np.exp(lb - mb)
    true = 0.5 * (ma + math.log(sa.sum())) + 0.5 * (mb + math.log(sb.sum())) + math.log(sv[0])
    grad = np.concatenate([0.5 * sa / sa.sum() - 0.5 * (U * U).sum(1), 0.5 * sb / sb.sum() - 0.5 * (V * V).sum(1)])
    return true + math.log(total) / (2 * p), grad, true


def _power_of_two_scale(s: np.ndarray, W: np.ndarray) -> np.ndarray:
    """s times the power of 2 that brings ||S W||_F into [1/2, 1) (s itself when that norm is 0 or not finite)."""
    f = float(np.linalg.norm(s[:, None] * W))
    if not (f > 0 and math.isfinite(f)):
        return s
    return np.ldexp(s, -math.frexp(f)[1])


@cached_by_weights()  # a per-head constant: computed once per head
def diagonal_scalings(W_Q: np.ndarray, W_K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The scalings (s, t) (positive, finite, float64, length d; read-only) that approximately minimize (1) over
    s, t > 0 (module docstring). All ones (the unscaled d ||M||_2) for a zero or non-finite W_Q or W_K."""
    from scipy.optimize import Bounds, minimize

    d = W_Q.shape[0]
    ones = np.ones(d)
    fq, fk = float(np.linalg.norm(W_Q)), float(np.linalg.norm(W_K))
    if not (fq > 0 and fk > 0 and math.isfinite(fq) and math.isfinite(fk)):
        return _read_only(ones, ones)
    A0, B0 = W_Q / fq, W_K / fk  # (2) is invariant under a scale of W_Q or W_K; this keeps every Gram near 1
    best = {"value": math.inf, "x": np.zeros(2 * d)}
    if not math.isfinite(_objective(best["x"], A0, B0, SCHATTEN_ORDERS[0])[2]):
        return _read_only(ones, ones)  # M = 0 in floats: nothing to scale
    x = best["x"]
    for p in SCHATTEN_ORDERS:
        def fun(z, p=p):
            try:
                f, g, true = _objective(z, A0, B0, p)
            except np.linalg.LinAlgError:
                return math.inf, np.zeros_like(z)
            if not (math.isfinite(f) and np.all(np.isfinite(g))):
                return math.inf, np.zeros_like(z)
            if true < best["value"]:
                best["value"], best["x"] = true, z.copy()
            return f, g

        x = minimize(fun, x, jac=True, method="L-BFGS-B", bounds=Bounds(-LOG_RANGE, LOG_RANGE),
                     options={"maxiter": STEPS_PER_ORDER}).x
    la, lb = best["x"][:d], best["x"][d:]
    s = _power_of_two_scale(np.exp(-(la - la.max()) / 2), W_Q)
    t = _power_of_two_scale(np.exp(-(lb - lb.max()) / 2), W_K)
    return _read_only(s, t)


def _read_only(s: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s, t = np.array(s, dtype=np.float64), np.array(t, dtype=np.float64)
    s.flags.writeable = t.flags.writeable = False
    return s, t


def diagonal_bilinear_bound(W_Q: np.ndarray, W_K: np.ndarray) -> float:
    """The certified bound (1) at the scalings `diagonal_scalings` chooses (+inf if it cannot be evaluated)."""
    return scaled_spectral_bound(W_Q, W_K, *diagonal_scalings(W_Q, W_K))


@cached_by_weights()  # a per-head constant: computed once per head
def head_bilinear_bound(W_Q: np.ndarray, W_K: np.ndarray, norm: str) -> float:
    """beta >= max_{||x||, ||y|| <= 1} x W_Q W_K^T y^T over the norm's unit ball (outward rounded): the one number
    both the first-order certificate and the varying query's relaxation use.

    l2: the spectral bound (`spectral_norm_bound`). linf: the smallest of sum_ab |M_ab| (its float sum plus the
    product's error, gamma_{d_h + 2} sum_h ||W_Q[:, h]||_1 ||W_K[:, h]||_1, then the sum's), that column-norm sum
    itself, d times the spectral bound (||x||_2 <= sqrt(d) on the box) and the diagonally scaled bound (1) at
    `diagonal_scalings`: the four bounds `attncert.audit`'s `HeadEnclosure.bilinear_bound` evaluates in balls.
    """
    spec = spectral_norm_bound(W_Q, W_K)
    if norm == "l2":
        return spec
    d, dh = W_Q.shape
    cols = float((np.abs(W_Q).sum(0) * np.abs(W_K).sum(0)).sum())
    entry = (float(np.abs(W_Q @ W_K.T).sum()) + gamma(dh + 2) * cols) * (1.0 + 2.0 * gamma(d * d + dh + 4))
    return min(entry, cols * (1.0 + gamma(2 * d + dh)), d * spec, diagonal_bilinear_bound(W_Q, W_K))
