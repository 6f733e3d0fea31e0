"""Convex scalar operators: exp and the positive reciprocal, with per-objective tangent points.

On an input interval [l, u] (sound for every theta in [0, 1]):

* exp:   upper = secant  e^l + (e^u - e^l)/(u - l) (x - l);  lower = tangent at d = l + theta (u - l).
* 1/x, l > 0 (convex, decreasing): upper = secant 1/l - (x - l)/(l u); lower = tangent 2/d - x/d^2.
* width u - l <= ZERO_WIDTH: the constant bounds f(l), f(u) (resp. f(u), f(l) for 1/x).

CROWN's theta depends on the bound network's relaxation rule (`set_relaxation_rule`): 1/2 under
"mid" (bound_propagation's default); under "auto_lirpa" exp's tangent point is min((l + u)/2, l + 0.99)
(auto_LiRPA's `BoundExp`), i.e. theta = min(1/2, 0.99/(u - l)), and 1/x's stays at the midpoint
(auto_LiRPA's `BoundReciprocal`).

The library's `BoundReciprocal` returns reversed bounds for a zero-width interval; this one is sound.
`PositiveReciprocal(floor=f)` declares a structural lower bound x >= f > 0 of its input (the softmax
denominator sum_k exp(s_k - s_j) contains exp(0) = 1, so f = 1): every input interval is raised to
[max(l, f), u] before the domain check and the relaxation, so a lower bound lost to rounding or to a
loose relaxation (a tangent of exp far below 0) cannot make 1/x undefined.
"""
from __future__ import annotations

import torch
from bound_propagation import Reciprocal
from bound_propagation.activation import BoundActivation, assert_bound_order
from bound_propagation.bounds import IntervalBounds

from attncert.baselines.relaxation_parameters import (AUTO_LIRPA_EXP_TANGENT_CAP, DEFAULT_PARAMETER, ZERO_WIDTH,
                                                      PerObjectiveParameters, each_side)


class PositiveReciprocal(Reciprocal):
    """y = 1 / x for x > 0; `floor` (optional) is a structural lower bound x >= floor > 0 of the input."""

    def __init__(self, floor: float | None = None):
        super().__init__()
        if floor is not None and not floor > 0:
            raise ValueError("floor must be positive")
        self.floor = floor


# --------------------------------------------------------------------------------------------------


class _BoundConvexActivation(PerObjectiveParameters, BoundActivation):
    """Shared code for convex scalar functions: secant above, tangent at l + theta (u - l) below."""

    def __init__(self, module, factory, **kwargs):
        BoundActivation.__init__(self, module, factory, **kwargs)
        self._init_parameters()
        self.lower_input = None
        self.upper_input = None
        self.point = None  # mask of zero-width neurons

    # f, f' and the domain check are provided by subclasses
    def f(self, x):
        raise NotImplementedError

    def fprime(self, x):
        raise NotImplementedError

    def check_domain(self, lower, upper):
        pass

    def constant_bounds(self, lower, upper):
        """(lower constant, upper constant) of f on a point-like interval."""
        raise NotImplementedError

    def default_theta(self, lower, upper):
        """CROWN's tangent position theta in [0, 1] under the network's relaxation rule."""
        return torch.full_like(lower, DEFAULT_PARAMETER)

    @assert_bound_order
    def alpha_beta(self, preactivation):
        lower, upper = preactivation.lower.detach(), preactivation.upper.detach()
        self.check_domain(lower, upper)
        self.lower_input, self.upper_input = lower, upper
        self.point = (upper - lower) <= ZERO_WIDTH
        # CROWN defaults, stored as the library stores them (alpha = slope, beta = intercept)
        self.alpha_upper, self.beta_upper = self.secant()
        self.theta0 = self.default_theta(lower, upper).unsqueeze(-2)  # (..., 1, neurons)
        slope, intercept = self.tangent(self.theta0)
        self.alpha_lower, self.beta_lower = slope.squeeze(-2), intercept.squeeze(-2)

    def secant(self):
        l, u, point = self.lower_input, self.upper_input, self.point
        fl, fu = self.f(l), self.f(u)
        width = torch.where(point, torch.ones_like(l), u - l)
        slope = torch.where(point, torch.zeros_like(l), (fu - fl) / width)
        intercept = torch.where(point, self.constant_bounds(l, u)[1], fl - slope * l)
        return slope, intercept

    def tangent(self, theta):
        """Tangent at d = l + theta (u - l); theta is (..., objectives, neurons)."""
        l, u, point = (t.unsqueeze(-2) for t in (self.lower_input, self.upper_input, self.point))
        d = l + theta * (u - l)
        slope = self.fprime(d)
        intercept = self.f(d) - slope * d
        slope = torch.where(point, torch.zeros_like(slope), slope)
        intercept = torch.where(point, self.constant_bounds(l, u)[0], intercept)
        return slope, intercept

    def clear_relaxation(self):
        super().clear_relaxation()
        self.clear_parameters()
        self.lower_input = self.upper_input = self.point = self.theta0 = None

    def crown_backward(self, linear_bounds, optimize):
        assert self.bounded
        sec_slope, sec_int = self.alpha_upper, self.beta_upper

        def one_pass(W, acc_bias, pass_name):
            # Upper pass: W >= 0 takes the upper relaxation; lower pass: W >= 0 takes the lower one.
            if self.alpha_key is None:
                tan_slope, tan_int = self.alpha_lower.unsqueeze(-2), self.beta_lower.unsqueeze(-2)
            else:
                theta = self.parameter(pass_name, "theta", W.shape, W, init=self.theta0)
                tan_slope, tan_int = self.tangent(theta)
            use_secant = (W >= 0) if pass_name == "upper" else (W < 0)
            lam = torch.where(use_secant, sec_slope.unsqueeze(-2), tan_slope)
            mu = torch.where(use_secant, sec_int.unsqueeze(-2), tan_int)
            return W * lam, acc_bias + (W * mu).sum(dim=-1)

        return each_side(linear_bounds, lambda bounds, upper: one_pass(*bounds, "upper" if upper else "lower"))

    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        self.check_domain(bounds.lower, bounds.upper)
        return super().ibp_forward(bounds, save_relaxation=save_relaxation, save_input_bounds=save_input_bounds)

    def parameterize_alpha_beta(self, alpha_lower, alpha_upper, beta_lower, beta_upper):
        return alpha_lower, alpha_upper, beta_lower, beta_upper

    def bound_parameters(self):  # the library's own alpha loop is not used with these modules
        return []


class BoundAlphaExp(_BoundConvexActivation):
    def f(self, x):
        return torch.exp(x)

    def fprime(self, x):
        return torch.exp(x)

    def constant_bounds(self, lower, upper):
        return torch.exp(lower), torch.exp(upper)

    def default_theta(self, lower, upper):
        half = torch.full_like(lower, DEFAULT_PARAMETER)
        if self.relaxation_rule != "auto_lirpa":
            return half
        width = upper - lower  # tangent point min(l + w/2, l + 0.99)
        capped = AUTO_LIRPA_EXP_TANGENT_CAP / torch.where(width > 0, width, torch.ones_like(width))
        return torch.where(width > 0, torch.minimum(half, capped), half)


class BoundAlphaPositiveReciprocal(_BoundConvexActivation):
    def f(self, x):
        return 1.0 / x

    def fprime(self, x):
        return -1.0 / (x * x)

    def constant_bounds(self, lower, upper):
        return 1.0 / upper, 1.0 / lower

    def check_domain(self, lower, upper):
        if torch.any(lower <= 0):
            raise ValueError("PositiveReciprocal: input interval reaches 0 (softmax denominator bound not positive)")

    def _floored(self, bounds: IntervalBounds) -> IntervalBounds:
        """[max(l, floor), u]: the structural lower bound of the input (no-op without a floor)."""
        floor = self.module.floor
        if floor is None:
            return bounds
        lower = torch.clamp(bounds.lower, min=floor)
        return IntervalBounds(bounds.region, lower, torch.maximum(bounds.upper, lower))

    def alpha_beta(self, preactivation):
        return super().alpha_beta(self._floored(preactivation))

    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        bounds = self._floored(bounds)
        self.check_domain(bounds.lower, bounds.upper)
        if save_relaxation:
            self.alpha_beta(preactivation=bounds)
            self.bounded = True
        if save_input_bounds:
            self.input_bounds = bounds
        return IntervalBounds(bounds.region, 1.0 / bounds.upper, 1.0 / bounds.lower)
