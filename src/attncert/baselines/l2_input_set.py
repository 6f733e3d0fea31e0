"""Per-token l2 input set for `bound_propagation` (a sound replacement for its `LpNormSet`).

The perturbation x = (delta_1, ..., delta_n) in R^{n d} (token-major, flattened) ranges over

    B = { x : ||delta_j - c_j||_2 <= r_j  for every token j },

a product of n Euclidean balls. A linear function a . x + b with a = (a_1, ..., a_n), a_j in R^d,
has the exact range over B

    max_B a . x + b = a . c + b + sum_j r_j ||a_j||_2,      min_B = a . c + b - sum_j r_j ||a_j||_2,

(the dual norm of each token's coefficient block, summed: the maximum separates over tokens, and
max_{||u||_2 <= r} a_j . u = r ||a_j||_2 by Cauchy-Schwarz, attained at u = r a_j / ||a_j||_2).
`concretize` applies this to every row of CROWN's linear bounds. Its bounding box, used by IBP, is
c_j +- r_j in every coordinate.

Why not the library's `LpNormSet`: version 0.4.7 uses the dual exponent q = p / (1 - p) (= -2 for
p = 2) instead of p / (p - 1) and treats the whole vector as one ball, so its bounds are unsound for
an l2 ball (docs/baselines.md). This class is used for norm "l2" instead.

Radii are stored per coordinate (the token's radius repeated d times), so that indexing the set the
way the library indexes regions (`region[..., a:b]`) stays well defined.
"""
from __future__ import annotations

import torch
from bound_propagation.bounds import AbstractInputSet


class PerTokenL2Ball(AbstractInputSet):
    """{x : ||x_j - center_j||_2 <= radius_j} with x_j the j-th block of `token_dim` coordinates.

    center: (..., n * token_dim); radius: a scalar, a tensor broadcastable to the batch shape
    (...,), or a per-coordinate tensor of the same shape as `center`.
    """

    def __init__(self, center: torch.Tensor, radius, token_dim: int):
        self.center = center
        self.token_dim = int(token_dim)
        radius = torch.as_tensor(radius, dtype=center.dtype, device=center.device)
        if radius.shape != center.shape:
            radius = radius.reshape(*radius.shape, *([1] * (center.dim() - radius.dim())))
            radius = radius.expand_as(center).clone()
        if torch.any(radius < 0):
            raise ValueError("radius must be nonnegative")
        self.radius = radius

    # ----- container protocol used by the library -----
    def __getitem__(self, item):
        return PerTokenL2Ball(self.center[item], self.radius[item], self.token_dim)

    def __len__(self):
        return self.center.size(0)

    def size(self, dim=None):
        return self.center.size() if dim is None else self.center.size(dim)

    @property
    def device(self):
        return self.center.device

    @property
    def dtype(self):
        return self.center.dtype

    def to(self, *args, **kwargs):
        return PerTokenL2Ball(self.center.to(*args, **kwargs), self.radius.to(*args, **kwargs), self.token_dim)

    def cpu(self):
        return self.to(torch.device("cpu"))

    # ----- bounds -----
    def _token_radius(self) -> torch.Tensor:
        """(..., n): the radius of each token (first coordinate of its block)."""
        return self.radius[..., :: self.token_dim]

    def _spread(self, slope: torch.Tensor) -> torch.Tensor:
        """sum_j r_j ||slope_row_j||_2 for every row of slope (..., m, n d) -> (..., m)."""
        n_in = slope.size(-1)
        if n_in % self.token_dim != 0 or n_in != self.center.size(-1):
            raise ValueError(f"slope has {n_in} input coordinates; the set has {self.center.size(-1)} "
                             f"(token_dim {self.token_dim})")
        blocks = slope.reshape(*slope.shape[:-1], n_in // self.token_dim, self.token_dim)
        norms = torch.linalg.vector_norm(blocks, ord=2, dim=-1)  # (..., m, n)
        return (norms * self._token_radius().unsqueeze(-2)).sum(dim=-1)

    def concretize(self, linear_bounds):
        center = self.center.unsqueeze(-2)  # (..., 1, n d)
        lower = upper = None
        if linear_bounds.lower is not None:
            slope, intercept = linear_bounds.lower
            mid = center.matmul(slope.transpose(-1, -2)).squeeze(-2) + intercept
            lower = mid - self._spread(slope)
        if linear_bounds.upper is not None:
            slope, intercept = linear_bounds.upper
            mid = center.matmul(slope.transpose(-1, -2)).squeeze(-2) + intercept
            upper = mid + self._spread(slope)
        return lower, upper

    def bounding_hyperrect(self):
        from bound_propagation.bounds import IntervalBounds

        return IntervalBounds(self, self.center - self.radius, self.center + self.radius)
