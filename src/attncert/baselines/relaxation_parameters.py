"""Relaxation parameters shared by the bound modules: defaults, per-objective alpha slopes, and the
two-sided back-substitution step.

Full alpha-CROWN optimizes one relaxation parameter per neuron *and per objective*: every row of the
backward coefficient matrix (one bound being computed) may carry its own tangent points / McCormick
planes. `PerObjectiveParameters` stores them keyed by the bound being computed (`set_alpha_key`), so
the intermediate bounds of every layer can be optimized as well as the last one.
"""
from __future__ import annotations

import weakref

import torch
from torch import nn
from bound_propagation.bounds import LinearBounds


DTYPE = torch.float64
#: An input interval narrower than this is treated as a point (constant relaxation, still sound).
ZERO_WIDTH = 1e-12
#: Default relaxation parameter (theta for tangent points, kappa for McCormick planes) of the "mid"
#: rule: bound_propagation's defaults (tangents at the midpoint, the two McCormick planes averaged).
DEFAULT_PARAMETER = 0.5
#: The CROWN relaxation rules a bound network can use (`set_relaxation_rule`):
#:   "mid"        bound_propagation 0.4.7's defaults: tangent points at the interval midpoint
#:                (theta = 1/2), McCormick planes averaged (kappa = 1/2);
#:   "auto_lirpa" auto_LiRPA's choices: one McCormick plane per side (kappa = 1: lower plane through
#:                (lx, ly), upper plane through (lx, uy), as `BoundMul` / `MulHelper` with its default
#:                interpolation parameter 1), exp's tangent at min(midpoint, l + 0.99) (`BoundExp`),
#:                1/x's tangent at the midpoint (`BoundReciprocal`); secants unchanged.
RELAXATION_RULES = ("mid", "auto_lirpa")
#: auto_LiRPA's cap on exp's lower tangent point: d = min((l + u)/2, l + 0.99).
AUTO_LIRPA_EXP_TANGENT_CAP = 0.99


def each_side(linear_bounds: LinearBounds, step, linear: bool = False) -> LinearBounds:
    """One back-substitution step applied to both sides of a linear bound.

    step((A, bias), upper) -> (A', bias'); `upper` tells which side (relaxations pick their planes by it).
    linear=True: the step does not depend on the side (a linear map); where both sides hold the same tensors (the
    identity a relaxation's back-substitution starts from) it is taken once and both sides share the result.
    """
    lo, up = linear_bounds.lower, linear_bounds.upper
    if linear and lo is not None and up is not None and lo[0] is up[0] and lo[1] is up[1]:
        shared = step(lo, False)
        return LinearBounds(linear_bounds.region, shared, shared)
    lower = None if lo is None else step(lo, False)
    upper = None if up is None else step(up, True)
    return LinearBounds(linear_bounds.region, lower, upper)


class PerObjectiveParameters:
    """Relaxation parameters in [0, 1], one per (objective, neuron), stored per key and pass.

    `alpha_key` is set by the optimizer (`set_alpha_key`) to name the bound being computed (an
    intermediate layer or the output); None means "use the CROWN default for every objective".
    The pass is "lower" or "upper": the lower and upper bound of an objective get separate parameters.
    """

    def _init_parameters(self):
        self.alpha_key = None
        self.relaxation_rule = "mid"
        self._parameters_by_key = {}

    def parameter(self, pass_name: str, name: str, shape, like: torch.Tensor, init=DEFAULT_PARAMETER):
        """The parameter tensor of `shape` for the current key; created at `init` (a number or a tensor
        broadcastable to `shape`: the rule's CROWN default, so optimization starts at CROWN)."""
        key = (self.alpha_key, pass_name, name)
        p = self._parameters_by_key.get(key)
        if p is None or tuple(p.shape) != tuple(shape):
            start = torch.as_tensor(init, dtype=like.dtype, device=like.device).detach().expand(tuple(shape))
            p = start.clone().requires_grad_(True)
            self._parameters_by_key[key] = p
        return p

    def parameters_for(self, key):
        return [p for (k, _, _), p in self._parameters_by_key.items() if k == key]

    def clear_parameters(self):
        self._parameters_by_key = {}


_PARAMETERIZED: "weakref.WeakKeyDictionary[nn.Module, tuple]" = weakref.WeakKeyDictionary()


def _parameterized(root: nn.Module) -> tuple:
    """The parameterized relaxations of a bound network, in `root.modules()` order. A bound network's modules are
    fixed once it is built, so the walk over them is made once per network (alpha-CROWN sets the key of every
    relaxation twice per stage)."""
    found = _PARAMETERIZED.get(root)
    if found is None:
        found = _PARAMETERIZED[root] = tuple(m for m in root.modules() if isinstance(m, PerObjectiveParameters))
    return found


def set_relaxation_rule(root: nn.Module, rule: str) -> None:
    """Select the CROWN relaxation rule ("mid" or "auto_lirpa", see RELAXATION_RULES) of every
    parameterized relaxation in a bound network; alpha-CROWN starts from the same choice."""
    if rule not in RELAXATION_RULES:
        raise ValueError(f"relaxation rule must be one of {RELAXATION_RULES}; got {rule!r}")
    for m in _parameterized(root):
        m.relaxation_rule = rule


def set_alpha_key(root: nn.Module, key) -> None:
    for m in _parameterized(root):
        m.alpha_key = key


def alpha_parameters(root: nn.Module, key) -> list[torch.Tensor]:
    out = []
    for m in _parameterized(root):
        out.extend(m.parameters_for(key))
    return out


def clamp_alpha_parameters(params) -> None:
    with torch.no_grad():
        for p in params:
            p.clamp_(0.0, 1.0)


# --------------------------------------------------------------------------------------------------
