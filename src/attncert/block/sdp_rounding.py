"""Vertices of the box from the SDP relaxation of the centre quadratic: randomized hyperplane rounding.

For each specification row h with centre Hessian H_h (symmetric d x d), the vertex problem

    maximize    u^T H u
    subject to  u in {-1, 1}^d

is relaxed (u u^T -> X) to the semidefinite program

    maximize    <H, X>
    subject to  diag(X) = 1,  X positive semidefinite.

It is solved approximately in the Burer-Monteiro form X = V V^T, V in R^{d x k} with unit rows v_i (k = `rank`,
about 8-16): with A = H - Diag(H) (on diag(X) = 1 the diagonal only adds the constant tr(H)) and a shift s >= 0
making A + s I positive semidefinite (a power-iteration estimate of ||A||_2), each step

    V <- rows of (A + s I) V, each normalized to unit length

does not decrease <A, V V^T> (minorize-maximize: <A + sI, V V^T> is convex in V, the step maximizes its
linearization over the unit rows). Goemans-Williamson rounding then draws Gaussian g in R^k and takes the vertex
sign(V g) (`draws` per row, from a torch.Generator seeded by `seed`); each vertex is polished by the box-QP
coordinate ascent of `box_qp.box_qp_max` on A (zero diagonal: every coordinate step is an exact 1-flip, so the
points stay vertices), and the `count` best of the rounded and polished vertices, by u^T H u, that are distinct up
to sign (from each other and from given vertices to exclude) are returned.

A search heuristic: it finds good vertices, a lower-bound search for the box maximum of the quadratic (and, as
starts of `residual.ascent`, of f). Nothing here is used in any certificate, and nothing here is verified; the
verified-style upper bound of the same problem is `box_qp.box_qp_upper`.
"""
from __future__ import annotations

import torch

from attncert.block.box_qp import QuadraticForms, box_qp_max
from attncert.block.map import DTYPE


def burer_monteiro(A: QuadraticForms, rank: int, steps: int, gen: torch.Generator) -> torch.Tensor:
    """Unit-row factors V (P, d, rank) of the SDP max <A, V V^T>, diag(V V^T) = 1: `steps` shifted power steps
    from random Gaussian rows; A has a zero diagonal."""
    V = torch.randn(A.P, A.d, rank, dtype=DTYPE, generator=gen)
    V = V / V.norm(dim=-1, keepdim=True)
    shift = A.lipschitz().view(-1, 1, 1)
    for _ in range(steps):
        V = A.matvec(V.transpose(1, 2)).transpose(1, 2) + shift * V           # (A + s I) V, A symmetric
        V = V / V.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return V


def hyperplane_rounding(V: torch.Tensor, draws: int, gen: torch.Generator) -> torch.Tensor:
    """sign(V g) for `draws` Gaussian g per form: vertices (P, draws, d), a zero sign taken as +1."""
    g = torch.randn(V.shape[0], V.shape[-1], draws, dtype=DTYPE, generator=gen)
    u = torch.sign(V @ g).transpose(1, 2)
    u[u == 0] = 1.0
    return u.contiguous()


def _sign_key(u: torch.Tensor) -> bytes:
    """A vertex up to sign (u and -u have the same quadratic value): the pattern of sign(u) * sign(u_0)."""
    s = torch.where(u >= 0, 1, -1)
    return ((s * s[0]) > 0).numpy().tobytes()


def best_distinct(values: torch.Tensor, vertices: torch.Tensor, count: int,
                  exclude: torch.Tensor | None = None) -> torch.Tensor:
    """Per form, the `count` vertices of largest value (P, S) among (P, S, d) that differ up to sign from each
    other and from the sign vertices of `exclude` (P, E, d), best first; fewer such are padded with the best."""
    out = torch.empty(vertices.shape[0], count, vertices.shape[-1], dtype=vertices.dtype)
    for p in range(vertices.shape[0]):
        seen = {_sign_key(u) for u in exclude[p]} if exclude is not None else set()
        order = torch.argsort(values[p], descending=True).tolist()
        kept = []
        for s in order:
            key = _sign_key(vertices[p, s])
            if key not in seen:
                seen.add(key)
                kept.append(s)
            if len(kept) == count:
                break
        kept = kept or order[:1]
        out[p] = vertices[p, kept + kept[:1] * (count - len(kept))]
    return out


def sdp_rounding_vertices(H: torch.Tensor, count: int, *, rank: int = 12, steps: int = 40, draws: int = 32,
                          sweeps: int = 5, seed: int = 0, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """The `count` best hyperplane-rounding vertices (P, count, d) of max u^T H_p u over {-1, 1}^d for H (P, d, d)
    float64 symmetric, among the `draws` rounded vertices and their polished versions, distinct up to sign and
    from the sign vertices of `exclude` (P, E, d) (starts the caller has already); deterministic for a given seed.
    A search heuristic, never a bound."""
    gen = torch.Generator().manual_seed(int(seed))
    A = QuadraticForms(dense=H - torch.diag_embed(torch.diagonal(H, dim1=-2, dim2=-1)))
    V = burer_monteiro(A, rank, steps, gen)
    rounded = hyperplane_rounding(V, draws, gen)
    _, _, values, polished = box_qp_max(A, rounded, pga_steps=0, sweeps=sweeps)
    candidates = torch.cat([polished, rounded], dim=1)
    return best_distinct(torch.cat([values, A.value(rounded)], dim=1), candidates, count, exclude)


def rounding_starts(H: torch.Tensor, count: int, seed: int, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """Starts of the ascent on f from the SDP relaxation of the centre quadratic: the `count` best rounded
    vertices u of max u^T H u (other than the sign vertices of `exclude` (m, E, d), starts already taken) and
    their negations -u (f is not even), (m, 2 count, d); (m, 0, d) for count 0."""
    if count <= 0:
        return H.new_zeros(H.shape[0], 0, H.shape[-1])
    u = sdp_rounding_vertices(H, count, seed=seed, exclude=exclude)
    return torch.cat([u, -u], dim=1)
