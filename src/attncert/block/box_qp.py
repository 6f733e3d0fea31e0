"""Maximizing a quadratic form over the box [-1, 1]^d: best found (a lower bound), an SDP-dual
upper bound, and spectral summaries of the curvature (see `residual` for where they are used).

    box_qp_max      multi-start projected gradient ascent, then exact coordinate ascent (1-flip vertex
                    search at the box faces): a best-found value of max 1/2 u^T H u (NP-hard in general)
    box_qp_upper    1/2 u^T H u <= 1/2 sum_k max(D_kk + lambda_max(H - D), 0) for every diagonal D,
                    minimized over D by projected subgradient steps
    effective_rank  (sum |mu_k|)^2 / sum mu_k^2 over the eigenvalues mu of H (participation ratio);
                    beside it entropy_rank (exp of the spectral entropy) and stable_rank
                    (||H||_F^2 / ||H||_2^2): three definitions of "effective rank" give different numbers
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import torch

from attncert.block.map import DTYPE

CACHE_BYTES = 2 ** 21   # dense forms are iterated on in blocks of about this size (one form at d = 384)


class QuadraticForms:
    """P quadratic forms 1/2 u^T Q_p u on R^d: dense (P, d, d) or low rank J_p^T K_p J_p."""

    def __init__(self, dense: torch.Tensor | None = None, J: torch.Tensor | None = None, K: torch.Tensor | None = None):
        self.dense, self.J, self.K = dense, J, K
        if dense is not None:
            self.P, self.d = dense.shape[0], dense.shape[-1]
            self.diag = torch.diagonal(dense, dim1=-2, dim2=-1)
        else:
            self.P, self.d = J.shape[0], J.shape[-1]
            self.diag = torch.einsum("pnd,pnk,pkd->pd", J, K, J)

    def matvec(self, u):                       # u (P, S, d) -> (P, S, d)
        if self.dense is not None:
            return u @ self.dense
        return ((u @ self.J.transpose(-1, -2)) @ self.K) @ self.J

    def column(self, k: int, forms: torch.Tensor | None = None):   # (P, d), or (len(forms), d) of those forms
        if self.dense is not None:
            return self.dense[:, k, :] if forms is None else self.dense[forms, k, :]   # symmetric: row k = column k
        J, K = (self.J, self.K) if forms is None else (self.J[forms], self.K[forms])
        return torch.einsum("pnd,pnm,pm->pd", J, K, J[:, :, k])

    def blocks(self) -> list[tuple[int, "QuadraticForms"]]:
        """(first form, the forms' block) covering all P forms: dense forms in blocks of about CACHE_BYTES, so that
        an iteration's matrix-vector products stay in cache; low-rank forms in one block. A form's products do
        not depend on the other forms of its batch (the same floats blocked or not)."""
        if self.dense is None:
            return [(0, self)]
        size = max(1, CACHE_BYTES // max(self.d * self.d * self.dense.element_size(), 1))
        return [(lo, QuadraticForms(dense=self.dense[lo:lo + size])) for lo in range(0, self.P, size)]

    def lipschitz(self) -> torch.Tensor:       # (P,) an upper bound on the spectral norm (30 power steps)
        u0 = torch.randn(self.P, 1, self.d, dtype=DTYPE, generator=torch.Generator().manual_seed(0))
        out = torch.empty(self.P, dtype=DTYPE)
        for lo, Qb in self.blocks():
            u = u0[lo:lo + Qb.P]
            for _ in range(30):
                u = Qb.matvec(u)
                u = u / u.norm(dim=-1, keepdim=True).clamp_min(1e-300)
            out[lo:lo + Qb.P] = 1.05 * Qb.matvec(u).norm(dim=-1)[:, 0] + 1e-300
        return out

    def value(self, u):
        return 0.5 * (u * self.matvec(u)).sum(-1)


def box_qp_max(Q: QuadraticForms, starts: torch.Tensor, pga_steps: int = 100, sweeps: int = 20):
    """Best-found max over u in [-1,1]^d of 1/2 u^T Q_p u, per form p; starts (P, S, d) in the box.

    Projected gradient ascent with step 1/L (L >= ||Q||, so the value never decreases), then exact
    coordinate ascent (each coordinate set to the maximizer of the 1-D quadratic on [-1, 1]; at a
    convex coordinate this is a vertex flip) until no coordinate moves (`coordinate_ascent`). Returns
    (values (P,), maximizers (P, d), all final values (P, S), all final points (P, S, d)).
    """
    u = starts.clone()
    if pga_steps > 0:
        step = (1.0 / Q.lipschitz()).view(-1, 1, 1)
        for lo, Qb in Q.blocks():                                   # the forms' iterates are independent
            ub, sb = u[lo:lo + Qb.P], step[lo:lo + Qb.P]
            for _ in range(pga_steps):
                ub = torch.clamp(ub + sb * Qb.matvec(ub), -1.0, 1.0)
            u[lo:lo + Qb.P] = ub
    u = coordinate_ascent(Q, u.contiguous(), Q.matvec(u), sweeps)
    vals = 0.5 * (u * Q.matvec(u)).sum(-1)
    best = vals.argmax(-1)
    idx = torch.arange(Q.P)
    return vals[idx, best], u[idx, best], vals, u


def coordinate_ascent(Q: QuadraticForms, u: torch.Tensor, Qu: torch.Tensor, sweeps: int) -> torch.Tensor:
    """Exact coordinate ascent of 1/2 u^T Q_p u from u (P, S, d) with Qu = Q u, at most `sweeps` sweeps over the
    coordinates (fewer when one sweep moves none); returns the final points (P, S, d).

    With g = (Q u)_k - Q_kk u_k the linear coefficient of u_k, the 1-D maximizer on [-1, 1] is the vertex sign(g)
    where Q_kk >= 0 and clamp(-g / Q_kk) where Q_kk < 0; it is taken where it gains more than 1e-15 (1 + |g|).
    A step u_k -> u_k + c changes Q u by c Q e_k: only the (form, start) pairs whose u_k moved are updated. The
    loop runs on numpy views of the same float64 arrays (each operation an elementwise IEEE operation, so the same
    numbers as the torch operations it replaces, at a fraction of the per-call overhead on these small arrays).
    """
    un = u.numpy()
    Qun = Qu.contiguous().numpy().copy()
    diag = Q.diag.contiguous().numpy()
    dense = None if Q.dense is None else Q.dense.numpy()
    with np.errstate(all="ignore"):                             # inf / nan as torch gives them, silently
        for _ in range(sweeps):
            moved = False
            for k in range(Q.d):
                qkk = diag[:, k, None]                                  # (P, 1)
                uk = un[:, :, k]
                g = Qun[:, :, k] - qkk * uk                             # linear coefficient of u_k
                convex = qkk > 0
                vertex = np.where(g >= 0, 1.0, -1.0)
                interior = np.clip(-g / np.where(qkk < 0, qkk, -1.0), -1.0, 1.0)
                new = np.where(convex | (qkk == 0), vertex, interior)
                gain = 0.5 * qkk * (new * new - uk * uk) + g * (new - uk)
                new = np.where(gain > 1e-15 * (1.0 + np.abs(g)), new, uk)
                change = new - uk
                forms, starts_moved = np.nonzero(change)
                if forms.size:
                    moved = True
                    un[:, :, k] = new
                    column = (dense[forms, k, :] if dense is not None
                              else Q.column(k, torch.from_numpy(forms)).numpy())     # symmetric: row k = column k
                    Qun[forms, starts_moved] = Qun[forms, starts_moved] + change[forms, starts_moved][:, None] * column
            if not moved:
                break
    return u


def top_eigenpairs(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lambda_max (P,), a unit eigenvector of it (P, n)) of each symmetric M_p (P, n, n), lower triangle read.

    LAPACK's dsyevr on the top index alone (tridiagonalization, then one eigenpair), instead of every eigenpair:
    the same float64 eigenproblem (agreeing with a full eigh to a few units of roundoff times ||M||). A non-finite
    M_p is handed to torch.linalg.eigh, whatever that gives (or raises)."""
    P, n, _ = M.shape
    vals = torch.empty(P, dtype=M.dtype)
    vecs = torch.empty(P, n, dtype=M.dtype)
    arr = M.detach().numpy()
    for p in range(P):
        if np.isfinite(arr[p]).all():
            w, v = scipy.linalg.eigh(arr[p], lower=True, subset_by_index=[n - 1, n - 1], driver="evr",
                                     check_finite=False)
            vals[p], vecs[p] = float(w[0]), torch.from_numpy(v[:, 0])
        else:
            w, v = torch.linalg.eigh(M[p])
            vals[p], vecs[p] = w[-1], v[:, -1]
    return vals, vecs


def minus_diagonal(M: torch.Tensor, D: torch.Tensor) -> torch.Tensor:
    """M - diag(D) for M (P, n, n), D (P, n), contiguous: M copied with D taken off its diagonal (the same floats as
    M - torch.diag_embed(D): off the diagonal M_ij - 0 = M_ij)."""
    out = M.clone(memory_format=torch.contiguous_format)
    torch.diagonal(out, dim1=-2, dim2=-1).copy_(torch.diagonal(M, dim1=-2, dim2=-1) - D)
    return out


def box_qp_upper(H: torch.Tensor, iterations: int = 20) -> torch.Tensor:
    """Upper bound on max over u in [-1,1]^d of 1/2 u^T H u, per matrix H (P, d, d), not audited.

    For every diagonal D: u^T H u = u^T (H - D - mu I) u + sum_k (D_kk + mu) u_k^2 with
    mu = lambda_max(H - D), so 1/2 u^T H u <= 1/2 sum_k max(D_kk + mu, 0) on the box (the SDP dual
    with y_k = max(D_kk + mu, 0); mu and its eigenvector v by `top_eigenpairs`, the subgradient in D_kk is
    [y_k > 0] - (sum_j [y_j > 0]) v_k^2). D starts at diag(H) and takes projected subgradient steps; the
    smallest bound seen is returned, raised by a rounding margin (eigvalsh error ~ d eps ||H||); the margin is a
    floating-point estimate, not interval arithmetic, and `attncert audit` lists this number as not covered.
    """
    P, d, _ = H.shape
    D = torch.diagonal(H, dim1=-2, dim2=-1).clone()
    best = torch.full((P,), math.inf, dtype=DTYPE)
    norm = torch.linalg.matrix_norm(H, ord=2)
    step = norm / d
    for it in range(iterations):
        mu, top = top_eigenpairs(minus_diagonal(H, D))
        y = D + mu.unsqueeze(-1)
        bound = 0.5 * torch.clamp(y, min=0).sum(-1)
        best = torch.minimum(best, bound)
        active = (y > 0).to(DTYPE)
        v2 = top ** 2
        sub = active - active.sum(-1, keepdim=True) * v2      # d bound / d D_kk
        D = D - (step / math.sqrt(it + 1)).unsqueeze(-1) * sub / sub.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return best + 8 * d * torch.finfo(DTYPE).eps * norm * d


def _spectrum(H: torch.Tensor, mu: torch.Tensor | None) -> torch.Tensor:
    """The eigenvalues of each H (P, d, d) (torch.linalg.eigvalsh), or `mu` when the caller has them already."""
    return torch.linalg.eigvalsh(H) if mu is None else mu


def effective_rank(H: torch.Tensor, mu: torch.Tensor | None = None) -> torch.Tensor:
    """(sum |mu|)^2 / sum mu^2 over the eigenvalues mu of each H (P, d, d) (`mu`: eigvalsh(H), if computed)."""
    mu = _spectrum(H, mu)
    return mu.abs().sum(-1) ** 2 / (mu * mu).sum(-1).clamp_min(1e-300)


def entropy_rank(H: torch.Tensor, mu: torch.Tensor | None = None) -> torch.Tensor:
    """exp of the spectral entropy: exp(-sum p_k log p_k) with p_k = |mu_k| / sum |mu| (Roy & Vetterli)."""
    a = _spectrum(H, mu).abs()
    p = a / a.sum(-1, keepdim=True).clamp_min(1e-300)
    return torch.exp(-(torch.where(p > 0, p * torch.log(p.clamp_min(1e-300)), torch.zeros_like(p))).sum(-1))


def stable_rank(H: torch.Tensor, mu: torch.Tensor | None = None) -> torch.Tensor:
    """||H||_F^2 / ||H||_2^2 = sum mu^2 / max mu^2 (never above the rank)."""
    mu = _spectrum(H, mu)
    return (mu * mu).sum(-1) / (mu * mu).amax(-1).clamp_min(1e-300)


def spectral_ratio(H: torch.Tensor, mu: torch.Tensor | None = None) -> torch.Tensor:
    """Nuclear / spectral norm ratio sum |mu| / max |mu| (a second effective-rank measure)."""
    mu = _spectrum(H, mu)
    return mu.abs().sum(-1) / mu.abs().amax(-1).clamp_min(1e-300)
