"""The bilinear product x * y of two bounded vectors, relaxed by McCormick planes.

On [lx, ux] x [ly, uy]: lower = kappa (ly x + lx y - lx ly) + (1 - kappa)(uy x + ux y - ux uy),
upper = kappa (uy x + lx y - lx uy) + (1 - kappa)(ly x + ux y - ux ly), kappa in [0, 1] (convex
combinations of the two McCormick planes; each plane is valid on the box), per objective.

CROWN's kappa depends on the bound network's relaxation rule (`set_relaxation_rule`): 1/2 under
"mid" (bound_propagation's default), 1 under "auto_lirpa" (auto_LiRPA's `BoundMul`: lower plane
ly x + lx y - lx ly, upper plane uy x + lx y - lx uy, x the first operand). The upper plane is not
symmetric in (x, y): the head puts the attention weight first and the value read second, the operand
order of auto_LiRPA's `BoundMatMul` for attention @ V (and q first, k second for q k^T).
"""
from __future__ import annotations

import torch
from bound_propagation import VectorMul
from bound_propagation.bivariate import BoundVectorMul

from attncert.baselines.relaxation_parameters import DEFAULT_PARAMETER, PerObjectiveParameters, each_side

#: CROWN's kappa per relaxation rule.
RULE_KAPPA = {"mid": DEFAULT_PARAMETER, "auto_lirpa": 1.0}

class BilinearProduct(VectorMul):
    """y = x[:h] * x[h:] (elementwise product of the two halves).

    exact_input=True declares that the module's input is an `InputLinear` of the network input, whose
    IBP interval is already the exact range, so CROWN need not back-substitute to bound it.
    """

    def __init__(self, exact_input: bool = False):
        super().__init__()
        self.exact_input = exact_input


class BoundAlphaBilinear(PerObjectiveParameters, BoundVectorMul):
    """McCormick relaxation of x[:h] * x[h:] with per-objective plane mixing kappa."""

    def __init__(self, module, factory, **kwargs):
        BoundVectorMul.__init__(self, module, factory, **kwargs)
        self._init_parameters()

    def init_kappa(self):  # parameters live in PerObjectiveParameters
        pass

    def _halves(self):
        b = self.input_bounds
        h = b.lower.size(-1) // 2
        return (b.lower[..., :h].detach(), b.upper[..., :h].detach(),
                b.lower[..., h:].detach(), b.upper[..., h:].detach())

    def planes(self, kappa_lower, kappa_upper):
        """Slopes (ax, ay) and intercepts of the lower and upper planes; kappas broadcast."""
        lx, ux, ly, uy = (t.unsqueeze(-2) for t in self._halves())
        k = kappa_lower
        lo = (k * ly + (1 - k) * uy, k * lx + (1 - k) * ux, -k * lx * ly - (1 - k) * ux * uy)
        k = kappa_upper
        up = (k * uy + (1 - k) * ly, k * lx + (1 - k) * ux, -k * lx * uy - (1 - k) * ux * ly)
        return lo, up

    def crown_backward(self, linear_bounds, optimize):
        assert self.bounded

        kappa = RULE_KAPPA[self.relaxation_rule]

        def one_pass(W, acc_bias, pass_name):
            if self.alpha_key is None:
                kl = ku = kappa
            else:
                kl = self.parameter(pass_name, "kappa_lower", W.shape, W, init=kappa)
                ku = self.parameter(pass_name, "kappa_upper", W.shape, W, init=kappa)
            lo, up = self.planes(kl, ku)
            use_upper = (W >= 0) if pass_name == "upper" else (W < 0)
            ax = torch.where(use_upper, up[0], lo[0])
            ay = torch.where(use_upper, up[1], lo[1])
            c = torch.where(use_upper, up[2], lo[2])
            return torch.cat([W * ax, W * ay], dim=-1), acc_bias + (W * c).sum(dim=-1)

        return each_side(linear_bounds, lambda bounds, upper: one_pass(*bounds, "upper" if upper else "lower"))

    def ibp_forward(self, bounds, save_relaxation=False, save_input_bounds=False):
        out = super().ibp_forward(bounds, save_relaxation=save_relaxation, save_input_bounds=save_input_bounds)
        if save_input_bounds and self.module.exact_input:
            self.bounded = True  # the IBP interval of an InputLinear is already the exact range
        return out

    def clear_relaxation(self):
        super().clear_relaxation()
        self.clear_parameters()

    def bound_parameters(self):
        return []

    def clip_params(self):
        pass

    def project_grads(self):
        pass
