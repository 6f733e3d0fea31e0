"""The box input set of the baselines: the library's `HyperRectangle` with the same concretization, formed cheaper.

For the box B = [l, u] (batch row b: lower l_b, upper u_b in R^{n d}) with centre c = (u + l)/2 and half-width
h = (u - l)/2, the library bounds a linear function A x + a (rows A_o) over B by

    min_B A_o x + a_o = c . A_o - h . |A_o| + a_o,      max_B A_o x + a_o = c . A_o + h . |A_o| + a_o,

as two batched matrix products, c A^T and h |A|^T, recomputing c and h on every call. `CentredBox` computes the
same numbers with c and h computed once, and for a box centred at 0 (the perturbation sets of the baselines) it
leaves out c . A_o when h . |A_o| is finite for every row: each product 0 * A_oi is then a (signed) zero, so the
sum is one and adding it changes no bit of the bound (only, where h . |A_o| = 0 exactly, the sign of a zero).
A non-finite h . |A_o| (an infinite coefficient: exp overflow) keeps the library's formula, so the 0 * inf = NaN
of the library is kept as well.

The product h . |A_o| is the library's (the same matrix product on the same operands); its gradient, what
alpha-CROWN differentiates, is formed by `_HalfWidthSpread` as autograd forms the library's,

    d (h . |A_o|) / d A_oi = sgn(A_oi) (h_i g_o),          g_o the incoming gradient,

each entry one rounded product h_i g_o times a sign, so the same numbers; but in the layout of A (no outer product
in the transposed layout, no c-term product and no sum of the two, whose c-term is zero). Everything later in the
backward pass then receives its gradient contiguous instead of transposed.
"""
from __future__ import annotations

import torch
from bound_propagation import HyperRectangle


class _HalfWidthSpread(torch.autograd.Function):
    """(A, h) -> h |A|^T (batch, 1, m) for A (batch, m, N), h (batch, 1, N); gradient for A only.

    uniform: h is one number per batch row (h_i = h_1), so h_i g_o is one product per row o, broadcast."""

    @staticmethod
    def forward(ctx, slope, half, uniform):
        ctx.save_for_backward(slope, half)
        ctx.uniform = uniform
        return half.matmul(slope.transpose(-1, -2).abs())

    @staticmethod
    def backward(ctx, grad):
        slope, half = ctx.saved_tensors
        if ctx.uniform:
            return slope.sgn().mul_(grad.transpose(-1, -2) * half[..., :1]), None, None
        return grad.transpose(-1, -2) * half * slope.sgn(), None, None


class CentredBox(HyperRectangle):
    """[lower, upper] (batch, N) as the library's `HyperRectangle`, centre and half-width computed once."""

    def __init__(self, lower, upper):
        super().__init__(lower, upper)
        self._center, self._half = (upper + lower) / 2, (upper - lower) / 2
        self._flags = None  # (centred at 0, one half-width per batch row), read from the data at first use

    @property
    def center(self):
        return self._center

    def _zero_center_uniform(self) -> tuple[bool, bool]:
        if self._flags is None:
            uniform = bool(torch.all(self._half == self._half[..., :1])) if self._half.numel() else False
            self._flags = (not bool(torch.any(self._center != 0)), uniform)
        return self._flags

    def __getitem__(self, item):
        """The box of the coordinates / batch rows `item`: the centre and half-width sliced alike (same numbers)."""
        part = CentredBox.__new__(CentredBox)
        part.lower, part.upper = self.lower[item], self.upper[item]
        part._center, part._half = self._center[item], self._half[item]
        part._flags = None
        return part

    def abs_transposed(self, weight: torch.Tensor) -> torch.Tensor:
        """|W^T| of a fixed weight W (out, N), as `_spread` forms it, computed once per weight and box."""
        cache = self.__dict__.setdefault("_abs_transposed", {})
        hit = cache.get(id(weight))
        if hit is None or hit[0] is not weight:
            hit = cache[id(weight)] = (weight, weight.transpose(-1, -2).abs())
        return hit[1]

    def to(self, *args, **kwargs):
        return CentredBox(self.lower.to(*args, **kwargs), self.upper.to(*args, **kwargs))

    def _spread(self, slope: torch.Tensor) -> torch.Tensor:
        half = self._half.unsqueeze(-2)
        if slope.dim() >= 3 and slope.requires_grad:
            return _HalfWidthSpread.apply(slope, half, self._zero_center_uniform()[1])
        if slope.dim() == 2 and not slope.requires_grad:  # a layer's fixed weight (InputLinear's exact IBP)
            return half.matmul(self.abs_transposed(slope))
        return half.matmul(slope.transpose(-1, -2).abs())

    def _side(self, slope: torch.Tensor, intercept: torch.Tensor, sign: float) -> torch.Tensor:
        spread = self._spread(slope)
        if self._zero_center_uniform()[0] and bool(torch.isfinite(spread).all()):
            bound = spread if sign > 0 else -spread
        else:
            centre = self._center.unsqueeze(-2).matmul(slope.transpose(-1, -2))
            bound = centre + spread if sign > 0 else centre - spread
        return bound.squeeze(-2) + intercept

    def concretize(self, linear_bounds):
        lower = None if linear_bounds.lower is None else self._side(*linear_bounds.lower, -1.0)
        upper = None if linear_bounds.upper is None else self._side(*linear_bounds.upper, 1.0)
        return lower, upper
