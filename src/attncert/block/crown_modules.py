"""Bound modules of the block network (`crown`): scalar curves, structured linear maps, the summing
parallel. Relaxations are documented in `crown`; each module states its own bound.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from bound_propagation import BoundModule, Parallel
from bound_propagation.activation import BoundActivation, assert_bound_order
from bound_propagation.bounds import IntervalBounds, LinearBounds
from bound_propagation.parallel import BoundParallel
from bound_propagation.sequential import BoundSequential

from attncert.block.map import DTYPE, ScalarCurve
from attncert.baselines.registry import head_factory
from attncert.baselines.relaxation_parameters import each_side


_EPS = torch.finfo(DTYPE).eps


# --------------------------------------------------------------------------------------------------
# Scalar curve module and its relaxation
# --------------------------------------------------------------------------------------------------
class ScalarCurveModule(nn.Module):
    """z -> phi(z) elementwise. `floor`: a lower bound every input satisfies by construction (the
    LayerNorm's rsqrt reads mean(c^2) + eps >= eps); bounds below it are raised to it."""

    def __init__(self, curve: ScalarCurve, floor: float | None = None):
        super().__init__()
        self.curve = curve
        self.floor = floor

    def forward(self, x):
        return self.curve.f(x)


def _extremes(curve: ScalarCurve, l, u, s):
    """(max, min) of phi(z) - s z over [l, u] (elementwise), exactly up to rounding."""
    def h(z):
        return curve.f(z) - s * z

    cands = [h(l), h(u)]
    cuts = [-torch.inf] + list(curve.inflections) + [torch.inf]
    for a0, b0 in zip(cuts[:-1], cuts[1:]):
        a = torch.clamp(l, min=a0) if np.isfinite(a0) else l.clone()
        b = torch.clamp(u, max=b0) if np.isfinite(b0) else u.clone()
        valid = a < b
        fa = curve.d1(a) - s
        fb = curve.d1(b) - s
        bracket = valid & (fa * fb < 0)
        if not bool(bracket.any()):
            continue
        lo, hi = a.clone(), b.clone()
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            fm = curve.d1(mid) - s
            left = torch.sign(fm) == torch.sign(fa)
            lo = torch.where(left, mid, lo)
            hi = torch.where(left, hi, mid)
        root = torch.where(bracket, 0.5 * (lo + hi), l)
        cands.append(h(root))
    stack = torch.stack(cands)
    scale = curve.f(l).abs() + curve.f(u).abs() + s.abs() * torch.maximum(l.abs(), u.abs()) + 1.0
    margin = 16 * _EPS * scale
    return stack.amax(0) + margin, stack.amin(0) - margin


class BoundScalarCurve(BoundActivation):
    """CROWN relaxation of a scalar curve (see the module docstring)."""

    def alpha_beta(self, preactivation):
        curve = self.module.curve
        l, u = preactivation.lower.detach(), preactivation.upper.detach()
        if self.module.floor is not None:
            l, u = torch.clamp(l, min=self.module.floor), torch.clamp(u, min=self.module.floor)
        if curve.domain_lower is not None and bool((l <= curve.domain_lower).any()):
            raise ValueError(f"{curve.name}: input interval leaves the domain z > {curve.domain_lower}")
        mid = 0.5 * (l + u)
        width = u - l
        point = width <= 1e-9 * (1.0 + mid.abs())
        safe = torch.where(point, torch.ones_like(width), width)
        secant = torch.where(point, curve.d1(mid), (curve.f(u) - curve.f(l)) / safe)
        tangent = curve.d1(mid)
        crosses = torch.zeros_like(l, dtype=torch.bool)
        for p in curve.inflections:
            crosses |= (l < p) & (u > p)
        curv = curve.d2(mid)
        convex = ~crosses & (curv >= 0)
        concave = ~crosses & (curv < 0)
        s_up = torch.where(concave, tangent, secant)
        s_lo = torch.where(convex, tangent, secant)
        b_up, _ = _extremes(curve, l, u, s_up)
        _, b_lo = _extremes(curve, l, u, s_lo)
        self.alpha_lower, self.beta_lower = s_lo, b_lo
        self.alpha_upper, self.beta_upper = s_up, b_up

    def parameterize_alpha_beta(self, alpha_lower, alpha_upper, beta_lower, beta_upper):
        return alpha_lower, alpha_upper, beta_lower, beta_upper

    def bound_parameters(self):
        return []

    @assert_bound_order
    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        curve = self.module.curve
        l, u = bounds.lower, bounds.upper
        if self.module.floor is not None:
            l, u = torch.clamp(l, min=self.module.floor), torch.clamp(u, min=self.module.floor)
            bounds = IntervalBounds(bounds.region, l, u)
        if curve.domain_lower is not None and bool((l <= curve.domain_lower).any()):
            raise ValueError(f"{curve.name}: input interval leaves the domain z > {curve.domain_lower}")
        if save_relaxation:
            self.alpha_beta(preactivation=bounds)
            self.bounded = True
        if save_input_bounds:
            self.input_bounds = bounds
        vals = [curve.f(l), curve.f(u)]
        for p in curve.stationary:
            inside = (l < p) & (u > p)
            vals.append(torch.where(inside, curve.f(torch.full_like(l, p)), vals[0]))
        stack = torch.stack(vals)
        lo, hi = stack.amin(0), stack.amax(0)
        return IntervalBounds(bounds.region, lo - 16 * _EPS * lo.abs(), hi + 16 * _EPS * hi.abs())


# --------------------------------------------------------------------------------------------------
# Structured linear modules (same arithmetic as a dense FixedLinear, cheaper back-substitution)
# --------------------------------------------------------------------------------------------------
def zeros_plus(shape: tuple, pieces: list) -> torch.Tensor:
    """torch.zeros(shape) with out[..., a:b] += x for each (a, b, x) of `pieces` (disjoint column ranges, x of the
    range's shape), without filling the written columns with zeros first: there out = x + 0 (the floats of 0 + x,
    signed zeros included), elsewhere 0. Under autograd with an x requiring grad: the zeros and the additions."""
    dtype = pieces[0][2].dtype
    spans = sorted((a, b) for a, b, _ in pieces)
    exact = (all(tuple(x.shape) == (*shape[:-1], b - a) for a, b, x in pieces)
             and all(b0 <= a1 for (_, b0), (a1, _) in zip(spans[:-1], spans[1:])))
    if not exact or (torch.is_grad_enabled() and any(x.requires_grad for _, _, x in pieces)):
        out = torch.zeros(shape, dtype=dtype)
        for a, b, x in pieces:
            out[..., a:b] += x
        return out
    out = torch.empty(shape, dtype=dtype)
    start = 0
    for a, b in spans + [(shape[-1], shape[-1])]:
        if a > start:
            out[..., start:a] = 0.0
        start = max(start, b)
    for a, b, x in pieces:
        torch.add(x, 0.0, out=out[..., a:b])
    return out


class ColumnSparseLinear(nn.Module):
    """y = W_sub x[cols] + b: a linear map reading only the input columns `cols`, given as a list of
    contiguous ranges (start, stop) of the input. identity=True: W_sub = I (a selection)."""

    def __init__(self, weight_sub: torch.Tensor | None, ranges: list, in_size: int, bias: torch.Tensor | None):
        super().__init__()
        self.ranges = [(int(a), int(b)) for a, b in ranges]
        self.identity = weight_sub is None
        width = sum(b - a for a, b in self.ranges)
        out = width if self.identity else weight_sub.shape[0]
        self.register_buffer("weight_sub", weight_sub if weight_sub is not None else torch.empty(0, dtype=DTYPE))
        self.register_buffer("bias", bias if bias is not None else torch.zeros(out, dtype=DTYPE))
        self.in_size = in_size
        self.out_size = out

    def gather(self, x):
        return torch.cat([x[..., a:b] for a, b in self.ranges], dim=-1)

    def forward(self, x):
        xs = self.gather(x)
        return (xs if self.identity else xs @ self.weight_sub.T) + self.bias


class BoundColumnSparseLinear(BoundModule):
    @property
    def need_relaxation(self):
        return False

    def partial(self, bounds):
        """(coefficients on the read columns, accumulated bias) of the back-substitution."""
        A, acc = bounds
        mod = self.module
        return (A if mod.identity else A.matmul(mod.weight_sub)), acc + A.matmul(mod.bias)

    def pieces(self, part) -> list:
        """[(a, b, columns of `part` that go to the input columns a:b)] over the read ranges."""
        out, offset = [], 0
        for a, b in self.module.ranges:
            out.append((a, b, part[..., offset:offset + (b - a)]))
            offset += b - a
        return out

    def scatter_into(self, out, part):
        for a, b, piece in self.pieces(part):
            out[..., a:b] += piece

    def _backward(self, bounds):
        part, acc = self.partial(bounds)
        return zeros_plus((*part.shape[:-1], self.module.in_size), self.pieces(part)), acc

    def crown_backward(self, linear_bounds, optimize):
        return each_side(linear_bounds, lambda bounds, upper: self._backward(bounds), linear=True)

    @assert_bound_order
    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        mod = self.module
        center = mod.gather(bounds.center)
        half = mod.gather(bounds.width / 2)
        if mod.identity:
            mid, rad = center, half
        else:
            mid, rad = center @ mod.weight_sub.T, half @ mod.weight_sub.abs().T
        mid = mid + mod.bias
        return IntervalBounds(bounds.region, mid - rad, mid + rad)

    def propagate_size(self, in_size):
        if in_size != self.module.in_size:
            raise ValueError(f"ColumnSparseLinear expects input size {self.module.in_size}, got {in_size}")
        return self.module.out_size


class PairDifferences(nn.Module):
    """t = s_k - s_j for every head h and ordered pair j != k: (..., H n) -> (..., H n (n-1))."""

    def __init__(self, heads: int, n: int):
        super().__init__()
        self.heads, self.n = heads, n
        self.register_buffer("offdiag", ~torch.eye(n, dtype=torch.bool))

    def forward(self, s):
        s = s.reshape(*s.shape[:-1], self.heads, self.n)
        t = s.unsqueeze(-2) - s.unsqueeze(-1)            # [j, k] = s_k - s_j
        return t[..., self.offdiag].reshape(*s.shape[:-2], -1)


class BoundPairDifferences(BoundModule):
    @property
    def need_relaxation(self):
        return False

    def _backward(self, bounds):
        A, acc = bounds
        mod = self.module
        full = torch.zeros(*A.shape[:-1], mod.heads, mod.n, mod.n, dtype=A.dtype)
        full[..., mod.offdiag] = A.reshape(*A.shape[:-1], mod.heads, mod.n * (mod.n - 1))
        out = full.sum(-2) - full.sum(-1)                  # coefficient of s_k minus that of s_j
        return out.reshape(*A.shape[:-1], mod.heads * mod.n), acc

    def crown_backward(self, linear_bounds, optimize):
        return each_side(linear_bounds, lambda bounds, upper: self._backward(bounds), linear=True)

    @assert_bound_order
    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        mod = self.module
        lo = bounds.lower.reshape(*bounds.lower.shape[:-1], mod.heads, mod.n)
        up = bounds.upper.reshape(*bounds.upper.shape[:-1], mod.heads, mod.n)
        t_lo = (lo.unsqueeze(-2) - up.unsqueeze(-1))[..., mod.offdiag].reshape(*lo.shape[:-2], -1)
        t_up = (up.unsqueeze(-2) - lo.unsqueeze(-1))[..., mod.offdiag].reshape(*lo.shape[:-2], -1)
        return IntervalBounds(bounds.region, t_lo, t_up)

    def propagate_size(self, in_size):
        return self.module.heads * self.module.n * (self.module.n - 1)


class GroupSums(nn.Module):
    """y_g = bias + sum of the `size` consecutive inputs of group g: (..., G size) -> (..., G)."""

    def __init__(self, size: int, bias: float):
        super().__init__()
        self.size, self.bias = size, bias

    def forward(self, x):
        return x.reshape(*x.shape[:-1], -1, self.size).sum(-1) + self.bias


class BoundGroupSums(BoundModule):
    @property
    def need_relaxation(self):
        return False

    def _backward(self, bounds):
        A, acc = bounds
        mod = self.module
        return A.repeat_interleave(mod.size, dim=-1), acc + mod.bias * A.sum(-1)

    def crown_backward(self, linear_bounds, optimize):
        return each_side(linear_bounds, lambda bounds, upper: self._backward(bounds), linear=True)

    @assert_bound_order
    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        mod = self.module
        return IntervalBounds(bounds.region, mod(bounds.lower), mod(bounds.upper))

    def propagate_size(self, in_size):
        return in_size // self.module.size


class BroadcastProduct(nn.Module):
    """[x (G size), y (G)] -> x_{g,e} y_g: each of G scalars y_g multiplies its own `size` entries of x
    (the LayerNorm products c_k r, and a_i v_i per head). Same nodes as `size` products with y tiled."""

    def __init__(self, groups: int, size: int):
        super().__init__()
        self.groups, self.size = groups, size

    def split(self, z):
        n = self.groups * self.size
        return z[..., :n].reshape(*z.shape[:-1], self.groups, self.size), z[..., n:n + self.groups]

    def forward(self, z):
        x, y = self.split(z)
        return (x * y.unsqueeze(-1)).reshape(*z.shape[:-1], -1)


class BoundBroadcastProduct(BoundModule):
    """McCormick relaxation with kappa = 1/2 (CROWN's default, as `BoundAlphaBilinear`): on the box
    [lx, ux] x [ly, uy] both planes have slopes (m_y, m_x) (interval midpoints) and intercepts
    c_lo = -(lx ly + ux uy)/2 (lower) and c_up = -(lx uy + ux ly)/2 (upper)."""

    def __init__(self, module, factory, **kwargs):
        super().__init__(module, factory, **kwargs)
        self.input_bounds = None
        self.bounded = False
        self.size = None

    @property
    def need_relaxation(self):
        return not self.bounded

    def backward_relaxation(self, region):
        return self.initial_linear_bounds(region, self.size), self

    def set_relaxation(self, linear_bounds):
        ib = linear_bounds.concretize()
        self.input_bounds = IntervalBounds(linear_bounds.region, torch.max(ib.lower, self.input_bounds.lower),
                                           torch.min(ib.upper, self.input_bounds.upper))
        self.bounded = True

    def clear_relaxation(self):
        self.input_bounds = None
        self.bounded = False

    def _planes(self):
        mod = self.module
        lx, ly = mod.split(self.input_bounds.lower)
        ux, uy = mod.split(self.input_bounds.upper)
        ly, uy = ly.unsqueeze(-1), uy.unsqueeze(-1)
        mx, my = 0.5 * (lx + ux), 0.5 * (ly + uy)
        c_lo = -0.5 * (lx * ly + ux * uy)
        c_up = -0.5 * (lx * uy + ux * ly)
        flat = lambda t: t.expand_as(lx).reshape(*lx.shape[:-2], -1)   # noqa: E731
        return flat(my), mx, flat(c_lo), flat(c_up)

    def crown_backward(self, linear_bounds, optimize):
        assert self.bounded
        mod = self.module
        ax, my_x, c_lo, c_up = self._planes()           # ax: slope on x (= m_y), my_x: m_x (G, size)

        def one_pass(W, acc, upper):
            Wg = W.reshape(*W.shape[:-1], mod.groups, mod.size)
            Ax = W * ax.unsqueeze(-2)
            Ay = (Wg * my_x.unsqueeze(-3)).sum(-1)
            hi, lo = (c_up, c_lo) if upper else (c_lo, c_up)
            bias = (W.clamp(min=0) * hi.unsqueeze(-2)).sum(-1) + (W.clamp(max=0) * lo.unsqueeze(-2)).sum(-1)
            return torch.cat([Ax, Ay], dim=-1), acc + bias

        return each_side(linear_bounds, lambda bounds, upper: one_pass(*bounds, upper))

    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        mod = self.module
        if save_input_bounds:
            self.input_bounds = bounds
        lx, ly = mod.split(bounds.lower)
        ux, uy = mod.split(bounds.upper)
        ly, uy = ly.unsqueeze(-1), uy.unsqueeze(-1)
        corners = torch.stack([lx * ly, lx * uy, ux * ly, ux * uy])
        lo = corners.amin(0).reshape(*lx.shape[:-2], -1)
        hi = corners.amax(0).reshape(*lx.shape[:-2], -1)
        return IntervalBounds(bounds.region, lo, hi)

    def propagate_size(self, in_size):
        if in_size != self.module.groups * (self.module.size + 1):
            raise ValueError("BroadcastProduct: input size mismatch")
        self.size = in_size
        return self.module.groups * self.module.size


class BoundSummingParallel(BoundParallel):
    """The library's BoundParallel (no split) with the branch contributions accumulated into one
    tensor: branches that start with a `ColumnSparseLinear` add only their read columns (same result
    as summing full coefficient matrices, far less memory traffic)."""

    def _branch(self, net, bounds, optimize, which):
        mods = list(net.bound_sequential) if isinstance(net, BoundSequential) else [net]
        if isinstance(mods[0], BoundColumnSparseLinear):
            for m in reversed(mods[1:]):
                bounds = m.crown_backward(bounds, optimize)
            part, acc = mods[0].partial(getattr(bounds, which))
            return mods[0], part, acc
        res = net.crown_backward(bounds, optimize)
        A, acc = getattr(res, which)
        return None, A, acc

    def crown_backward(self, linear_bounds, optimize):
        if self.module.split_size is not None:
            return super().crown_backward(linear_bounds, optimize)
        k = len(self.subnetworks) - 1
        in_size = self.in_size_total

        def combine(which):
            if getattr(linear_bounds, which) is None:
                return None
            parts = self.split(LinearBounds(linear_bounds.region,
                                            getattr(linear_bounds, which) if which == "lower" else None,
                                            getattr(linear_bounds, which) if which == "upper" else None),
                               self.out_sizes)
            total, acc_total = None, None
            for net, part in zip(self.subnetworks, parts):
                mod, A, acc = self._branch(net, part, optimize, which)
                if total is None:
                    total = zeros_plus((*A.shape[:-1], in_size), [(0, in_size, A)] if mod is None else mod.pieces(A))
                    acc_total = torch.zeros_like(acc)
                elif mod is None:
                    total += A
                else:
                    mod.scatter_into(total, A)
                acc_total += acc
            return total, acc_total - k * getattr(linear_bounds, which)[1]

        return LinearBounds(linear_bounds.region, combine("lower"), combine("upper"))

    def propagate_size(self, in_size):
        self.in_size_total = in_size
        return super().propagate_size(in_size)


def block_factory():
    """`head_factory()` (exp, 1/x, products, linear layers) plus this module's modules."""
    factory = head_factory()
    factory.register(Parallel, BoundSummingParallel)
    factory.register(ScalarCurveModule, BoundScalarCurve)
    factory.register(ColumnSparseLinear, BoundColumnSparseLinear)
    factory.register(PairDifferences, BoundPairDifferences)
    factory.register(GroupSums, BoundGroupSums)
    factory.register(BroadcastProduct, BoundBroadcastProduct)
    return factory
