"""Parallel branches reading the same input, y = (f_1(x), ..., f_k(x)): the library's `BoundParallel` with the
back-substitution's sum over the branches added in place of stacked.

Back-substituting A = (A_1 | ... | A_k) (split by the branches' outputs) through the branches gives, per branch,
A_i f_i(x) >= A'_i x + c_i (each side alike), so

    A y >= (A'_1 + ... + A'_k) x + (c_1 + ... + c_k) - (k - 1) c,

c the incoming bias, counted once in every branch's c_i. The library forms the sums by stacking the k
coefficient tensors (batch, objectives, input size) along a new last axis and summing over it: a copy of all k of
them and a strided reduction on every pass. This adds them left to right instead: the same sums (for k = 2, a
single rounded addition either way), without the copy.
"""
from __future__ import annotations

from functools import reduce
from operator import add

import torch
from bound_propagation.bounds import LinearBounds
from bound_propagation.parallel import BoundParallel


class BoundSummedParallel(BoundParallel):
    """`BoundParallel` whose back-substitution adds the branches' linear bounds (module docstring)."""

    def backward_relaxation(self, region):
        """The library's, without its concatenation when one branch alone has a relaxation to set (the head's
        value reads have none): the concatenation of one tensor is a copy of it, the same numbers."""
        if self.module.split_size is not None:
            return super().backward_relaxation(region)
        bounds = [self.submodule_backward_relaxation(region, network) for network in self.subnetworks]
        bounds = [bound for bound in bounds if bound[1] is not None]
        if len(bounds) != 1:
            return self._concatenated(region, bounds)
        linear, module, *extra = bounds[0]
        return (LinearBounds(region, linear.lower, linear.upper), self, [module], [linear.lower[0].size(-2)],
                [tuple(extra)])

    def _concatenated(self, region, bounds):
        """`BoundParallel.backward_relaxation`'s result for several branches with relaxations to set."""
        lower = (torch.cat([b[0].lower[0] for b in bounds], dim=-2), torch.cat([b[0].lower[1] for b in bounds], dim=-1))
        upper = (torch.cat([b[0].upper[0] for b in bounds], dim=-2), torch.cat([b[0].upper[1] for b in bounds], dim=-1))
        return (LinearBounds(region, lower, upper), self, [b[1] for b in bounds],
                [b[0].lower[0].size(-2) for b in bounds], [b[2:] for b in bounds])

    def crown_backward(self, linear_bounds, optimize):
        if self.module.split_size is not None:
            return super().crown_backward(linear_bounds, optimize)
        assert self.out_sizes is not None
        split_bounds = self.split(linear_bounds, self.out_sizes)
        residual = [network.crown_backward(split, optimize) for network, split in zip(self.subnetworks, split_bounds)]
        extra = len(self.subnetworks) - 1

        def side(parts, incoming):
            if incoming is None:
                return None
            A = reduce(add, (p[0] for p in parts))
            bias = reduce(add, (p[1] for p in parts)) - extra * incoming[1]
            return A, bias

        return LinearBounds(linear_bounds.region,
                            side([r.lower for r in residual], linear_bounds.lower),
                            side([r.upper for r in residual], linear_bounds.upper))
