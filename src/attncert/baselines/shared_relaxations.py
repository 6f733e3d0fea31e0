"""Every baseline of one head from shared work: one bound network per softmax graph, one CROWN relaxation per rule.

The methods of `linear_bound_baselines` on the same head (same specifications, same radii as the batch) repeat
work whose result is the same number for several of them:

* the network: every method on the same softmax graph builds the same network (`bound_network`); the relaxation
  rule is a switch on the built one (`set_relaxation_rule`), and every method clears what it set
  (`clear_relaxation`: relaxations, input intervals, alpha parameters), so one network serves them in turn;
* CROWN's intermediate bounds: "crown" computes them (`crown_relax`) and then the output's bound; the last-layer
  alpha-CROWN computes the same intermediate bounds (its stages take no steps: each stage's first and only iterate
  is the CROWN bound of every neuron, with the rule's CROWN parameters) and then optimizes the output's backward
  pass from them: here it starts from the relaxations CROWN set (`alpha_crown_upper(..., relaxed=True)`);
* CROWN's bound: the full alpha-CROWN starts with `crown_upper` on the same network and rule, the number "crown"
  reports: it is handed over (`alpha_crown_upper(..., crown=...)`).

The same operations on the same operands in the same order, so the same bounds, bit for bit, as the methods run
one at a time (tests/baselines/test_shared_relaxations.py). `shared_upper_bounds` returns, per method, the upper
bounds (radii, specifications) and the seconds the method costs on its own: the network build and, for the
methods that use it, CROWN's relaxation are counted for every method that needs them.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from attncert.baselines.linear_bound_baselines import (METHOD_SPECS, AlphaSettings, BaselineResult, _group_key,
                                                       alpha_crown_upper, baseline_upper_bounds, bound_network,
                                                       group_inputs, ibp_upper)
from attncert.baselines.relaxation_parameters import set_alpha_key, set_relaxation_rule
from attncert.configuration.device import resolve_device
from attncert.head.problem import HeadProblem


@torch.no_grad()
def _crown_relaxation(bnet, region, out_size: int) -> torch.Tensor:
    """CROWN's relaxations set on `bnet` (left there) and CROWN's upper bound of the output (`crown_upper`)."""
    set_alpha_key(bnet, None)
    bnet.propagate_size(region.size(-1))
    bnet.crown_relax(region)
    linear = bnet.crown_backward(bnet.initial_linear_bounds(region, out_size, lower=False, upper=True), False)
    return linear.concretize().upper


def shared_upper_bounds(first: HeadProblem, spec_rows, radii, methods, alpha: AlphaSettings,
                        device) -> dict[str, tuple[np.ndarray, float]]:
    """{method: (upper bounds (len(radii), m), seconds)} for `methods` on the head of `first` (the specifications
    `spec_rows` as objectives, the radii as the batch); raises whatever a method raises (the caller then bounds
    each method on its own)."""
    out: dict[str, tuple[np.ndarray, float]] = {}
    m = len(spec_rows)
    for graph in dict.fromkeys(METHOD_SPECS[k].softmax for k in methods):
        on_graph = [k for k in methods if METHOD_SPECS[k].softmax == graph]
        t0 = time.perf_counter()
        bnet, region = bound_network(first, spec_rows, radii, on_graph[0], device)
        build = time.perf_counter() - t0
        crown: dict[str, tuple[torch.Tensor, float]] = {}  # rule -> (CROWN's bound, seconds)
        for rule in dict.fromkeys(METHOD_SPECS[k].relaxation for k in on_graph
                                  if METHOD_SPECS[k].algorithm != "ibp"):
            set_relaxation_rule(bnet, rule)
            t1 = time.perf_counter()
            try:
                crown[rule] = (_crown_relaxation(bnet, region, m), time.perf_counter() - t1)
                for k in on_graph:
                    if METHOD_SPECS[k].algorithm == "alpha_crown_last_layer" and METHOD_SPECS[k].relaxation == rule:
                        t2 = time.perf_counter()
                        upper = alpha_crown_upper(bnet, region, m, alpha.iterations, alpha.lr, False, alpha.tolerance,
                                                  alpha.patience, betas=alpha.betas, relaxed=True)
                        out[k] = (upper.detach().cpu().numpy(), build + crown[rule][1] + time.perf_counter() - t2)
            finally:
                bnet.clear_relaxation()
                set_alpha_key(bnet, None)
        for k in on_graph:
            spec = METHOD_SPECS[k]
            t1 = time.perf_counter()
            if spec.algorithm == "ibp":
                out[k] = (ibp_upper(bnet, region).detach().cpu().numpy(), build + time.perf_counter() - t1)
            elif spec.algorithm == "crown":
                out[k] = (crown[spec.relaxation][0].detach().cpu().numpy(), build + crown[spec.relaxation][1])
            elif spec.algorithm == "alpha_crown":
                set_relaxation_rule(bnet, spec.relaxation)
                upper = alpha_crown_upper(bnet, region, m, alpha.iterations, alpha.lr, True, alpha.tolerance,
                                          alpha.patience, betas=alpha.betas, crown=crown[spec.relaxation][0])
                out[k] = (upper.detach().cpu().numpy(), build + crown[spec.relaxation][1] + time.perf_counter() - t1)
    return out


def head_upper_bounds(problems: list[HeadProblem], methods: list[str], *, device=None,
                      **alpha) -> dict[str, list[BaselineResult]]:
    """{method: `baseline_upper_bounds(problems, method, device=device, **alpha)`} with the batched call of each
    method made by `shared_upper_bounds` when the problems form one network (one head, radii and specifications
    differing). If the shared computation raises, every method makes its own call (as `baseline_upper_bounds`
    alone); a method's non-finite bounds are retried per radius there in either case."""
    keys = [_group_key(p) for p in problems]
    precomputed: dict[str, dict] = {}
    if problems and len(set(keys)) == 1 and all(k in METHOD_SPECS for k in methods):
        first, spec_rows, radii = group_inputs(problems, list(range(len(problems))))
        settings = AlphaSettings(**{f: t(alpha[k]) for f, k, t in (
            ("iterations", "alpha_iterations", int), ("lr", "alpha_lr", float),
            ("tolerance", "alpha_tolerance", float), ("patience", "alpha_patience", int),
            ("betas", "alpha_betas", lambda b: (float(b[0]), float(b[1])))) if k in alpha})
        try:
            shared = shared_upper_bounds(first, spec_rows, radii, methods, settings, resolve_device(device))
        except Exception:  # noqa: BLE001 - every method then makes its own call, with its own error handling
            shared = {}
        precomputed = {k: {keys[0]: v} for k, v in shared.items()}
    return {k: baseline_upper_bounds(problems, k, device=device, precomputed=precomputed.get(k), **alpha)
            for k in methods}
