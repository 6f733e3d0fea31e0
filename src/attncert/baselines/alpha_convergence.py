"""The convergence test of alpha-CROWN's projected Adam (`linear_bound_baselines._optimize_stage`).

A stage of alpha-CROWN bounds several quantities at once (the input neurons of one nonlinearity, or
the outputs), each with its own relaxation parameters, so each unit (batch row) has its own trajectory
of iterates. A bound o is an output of one unit, or all neurons of an intermediate stage of one unit
together (their widths summed: the stage ends when its total width stops improving, not when its slowest
neuron does). With w_o(t) the width of the best interval of o after iterate t (`stage_width`), o stops
at the first t >= patience with

    w_o(t - patience) - w_o(t) <= tolerance * |w_o(t)|        (`converged`)

and keeps its best bound from then on. Every iterate is a sound bound, so every stopped bound is sound;
stopping only decides how much of the optimization is paid for.
"""
from __future__ import annotations

import torch


def stage_width(
    lo: torch.Tensor | None, up: torch.Tensor | None, floor: torch.Tensor | None, clip=None
) -> torch.Tensor:
    """Width of the interval a stage hands on.

    Intermediate stages: w = min(up, u_IBP) - max(lo, l_IBP), clip = (l_IBP, u_IBP) the neuron's IBP
    interval, which the relaxation is intersected with (an optimized bound looser than IBP's changes
    nothing downstream, so its progress is not progress). The output: w = up - floor, floor = the value
    at the centre of the input set (attained, so w >= the bound's gap to the true maximum)."""
    if clip is not None:
        lo = lo if lo is None else torch.maximum(lo, clip[0])
        up = up if up is None else torch.minimum(up, clip[1])
    if up is None:
        return -lo if floor is None else floor - lo
    return up - (lo if floor is None else floor)


def ibp_clip(result, like: torch.Tensor | None):
    """(l_IBP, u_IBP) of the module whose input a stage bounds, when it has that interval in the same shape."""
    bounds = getattr(result[1], "input_bounds", None) if len(result) > 1 else None
    lower, upper = getattr(bounds, "lower", None), getattr(bounds, "upper", None)
    if like is None or not isinstance(lower, torch.Tensor) or lower.shape != like.shape:
        return None
    return lower.detach(), upper.detach()


def converged(w_old: torch.Tensor, w: torch.Tensor, tolerance: float, dims: tuple[int, ...] = ()) -> torch.Tensor:
    """Has the best width w improved by at most tolerance * |w| since the iterate `patience` back?

    Per bound: gain = w_old - w when both are finite; +inf when w just became finite (not converged); 0
    when w is still infinite (an overflowed bound that stays so has stopped improving); converged when
    gain <= tolerance * |w| (|w| taken as 0 when infinite). dims: sum gains and |w| over these dimensions
    first (one verdict for all bounds of an intermediate stage of one unit, kept with size 1)."""
    finite = torch.isfinite(w)
    gain = torch.where(torch.isfinite(w_old) & finite, w_old - w, torch.where(finite, torch.inf, 0.0))
    scale = torch.where(finite, w.abs(), 0.0)
    if dims:
        gain, scale = gain.sum(dim=dims, keepdim=True), scale.sum(dim=dims, keepdim=True)
    return gain <= tolerance * scale
