"""A near-optimal point of the box quadratic's SDP dual, found through its primal by the mixing method.

For a symmetric M (n x n) the box maximum of the quadratic and its semidefinite relaxation are

    max_{u in [-1,1]^n} 1/2 u^T M u  <=  max 1/2 <M, X>   subject to  X positive semidefinite,  diag(X) <= 1
                                      =  min 1/2 sum_i y_i subject to  diag(y) - M positive semidefinite,  y >= 0.

The primal is solved in the Burer-Monteiro form X = V V^T, V in R^{n x k} with rows ||v_i|| <= 1, by the mixing
method (Wang, Chang and Kolter 2017): one row at a time, v_i is set to the exact maximizer of the objective in v_i
with the other rows fixed,

    v_i <- argmax_{||v|| <= 1}  M_ii ||v||^2 + 2 v . g_i,   g_i = sum_{j != i} M_ij v_j,
         =  g_i / ||g_i||                                  if M_ii >= 0,
         =  g_i / ||g_i|| min(1, ||g_i|| / (-M_ii))         otherwise,

so the objective never decreases. At a stationary point the dual is read off by complementary slackness,
y_i = (M X)_ii (zero on a row inside the ball), and made feasible by one eigenvalue:
y <- max(y, 0) + max(lambda_max(M - diag(max(y, 0))), 0) (every y_i raised alike). Nothing here certifies: the
candidate goes to `certificate.rank_one_box_upper`, whose Cholesky check (with Rump's shift and the rounding of
forming the matrix) is the only thing that makes a dual valid. Measured on the centre Hessians of the block stage
(d = 384 and 768, 4 rows each): 10 sweeps at rank 8 reach the SDP's value within 0.2 % / 0.9 %, where 200
subgradient steps on the dual stay 20-30 % above it.

Cost: a sweep is n row updates of O(n k) each (one column of M times the row's change), O(n^2 k) per sweep and
matrix; the Python loop runs over the n rows with the P matrices batched.
"""
from __future__ import annotations

import numpy as np
import torch

from attncert.block.box_qp import minus_diagonal, top_eigenpairs
from attncert.block.map import DTYPE

RANK = 8          # columns of V (measured: 8 and 16 reach the same dual within 0.1 % after 30 sweeps)
SWEEPS = 10       # from random rows
WARM_SWEEPS = 3   # from the factors of a nearby matrix (the same row's centre Hessian)


def mixing_factors(M: torch.Tensor, rank: int = RANK, sweeps: int = SWEEPS, V0: torch.Tensor | None = None,
                   seed: int = 0) -> torch.Tensor:
    """Factors V (P, n, rank) with rows in the unit ball, X = V V^T a near-maximizer of <M_p, X> over
    {X PSD, diag(X) <= 1}; from V0 (P, n, rank) when given, else from random unit rows (seeded)."""
    P, n, _ = M.shape
    if V0 is None:
        V = torch.randn(P, n, rank, dtype=DTYPE, generator=torch.Generator().manual_seed(seed))
        V = V / V.norm(dim=-1, keepdim=True)
    else:
        V = V0.clone()
    V = V.contiguous()
    d = torch.diagonal(M, dim1=-2, dim2=-1)
    G = (M @ V).contiguous()                                    # (P, n, k): row i is sum_j M_ij v_j
    # the row updates on numpy views of the same float64 arrays: elementwise IEEE operations give the same numbers as
    # the torch ones at less per-call overhead; the row norm (its summation order) and G's update stay torch's
    Vn, Gn = V.numpy(), G.numpy()
    dn = d.contiguous().numpy()
    concave = dn < 0
    neg_d = np.maximum(-dn, 1e-300)                             # -M_ii, clamped (used where M_ii < 0)
    columns = M.transpose(1, 2).contiguous()
    with np.errstate(all="ignore"):                             # inf / nan as torch gives them, silently
        for _ in range(sweeps):
            for i in range(n):
                g = Gn[:, i] - dn[:, i:i + 1] * Vn[:, i]
                norm = np.maximum(torch.from_numpy(g).norm(dim=-1, keepdim=True).numpy(), 1e-300)
                length = np.where(concave[:, i:i + 1], np.minimum(norm / neg_d[:, i:i + 1], 1.0), 1.0)
                new = g / norm * length
                G += columns[:, i].unsqueeze(-1) * torch.from_numpy(new - Vn[:, i]).unsqueeze(1)
                Vn[:, i] = new
    return V


def mixing_dual(M: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """A dual candidate y (P, n) for the SDP of M (P, n, n) from primal factors V: max((M V V^T)_ii, 0) raised by
    lambda_max(M - diag y)^+ (feasible in exact arithmetic up to that eigenvalue's accuracy; verified elsewhere).
    A non-finite M_p gives a non-finite candidate (the check then rejects it)."""
    y = torch.full(M.shape[:2], float("inf"), dtype=DTYPE)
    ok = torch.isfinite(M).all(-1).all(-1) & torch.isfinite(V).all(-1).all(-1)
    if bool(ok.any()):
        Mo, Vo = M[ok], V[ok]
        yo = ((Mo @ Vo) * Vo).sum(-1).clamp_min(0.0)
        mu, _ = top_eigenpairs(minus_diagonal(Mo, yo))
        y[ok] = yo + mu.clamp_min(0.0).unsqueeze(-1)
    return y
