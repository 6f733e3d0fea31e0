"""IBP, CROWN and alpha-CROWN upper bounds on one attention head (Paper A's baselines).

Public API:

    baseline_upper_bound(problem, method) -> BaselineResult(upper, seconds, status, label)
    baseline_upper_bounds(problems, method) -> list[BaselineResult]     (batched; same results)

method in METHODS = {"ibp", "crown", "crown_mid", "alpha_crown", "alpha_crown_last_layer",
"crown_lirpa_softmax", "alpha_crown_last_layer_lirpa_softmax"}. `upper` is a sound upper bound on max g over the
perturbation
set of `problem` (for min g call it on `problem.negated()`). The head is the `bound_propagation`
network of `head_network.py` on x = delta in R^{n d}, float64.

Input sets: norm "linf" -> the library's `HyperRectangle` [-r, r]^{n d}; norm "l2" -> our
`PerTokenL2Ball` (the library's `LpNormSet` is unsound, see `l2_input_set.py`).

Methods (docs/baselines.md gives each one's auto_LiRPA counterpart):

* IBP: interval propagation (the first layer's interval is the exact range over the input set; every
  linear layer's interval is W+ l + W- u, without centre-radius cancellation).
* CROWN ("crown"): the library's `crown` (back-substitution; every intermediate bound needed by a
  relaxation is itself a CROWN bound, intersected with IBP) with auto_LiRPA's relaxation choices
  (rule "auto_lirpa": one McCormick plane per side, exp's tangent at min(mid, l + 0.99), 1/x's tangent
  at the midpoint, secants above).
* CROWN, mid plane ("crown_mid"): the same with bound_propagation's defaults (rule "mid": the two
  McCormick planes averaged, kappa = 1/2; tangents at the midpoint).
* alpha-CROWN (full): the same staged computation, but every bound is optimized over the relaxation
  parameters of all earlier nonlinearities, with separate parameters per bound being computed (each
  intermediate neuron's lower and upper bound, and each output): for the stage computing the bounds
  of the input of nonlinearity L,

      min over theta in [0,1]^P of  sum_o ( U_o(theta) - L_o(theta) )      (projected Adam, at most
                                                                          `alpha_iterations` steps),

  where theta holds one parameter per (objective o, earlier neuron) and the objectives are
  independent, so this minimizes each bound separately. The stage keeps, per neuron, the best bound
  over all evaluated iterates (every iterate is a valid bound), intersects it with the IBP interval,
  and fixes the relaxation of L on it before moving on; the output stage minimizes the upper bound.
  The first iterate of every stage uses the CROWN ("auto_lirpa") parameters, and the reported bound
  is the minimum of the best output iterate and the plain CROWN bound, so alpha-CROWN <= CROWN always.
  Stopping rule (`alpha_convergence`): each bound stops once the width of its best interval improved by
  at most `alpha_tolerance` of itself over `alpha_patience` steps, and keeps its best iterate.
* alpha-CROWN, last layer only ("alpha_crown_last_layer"): CROWN's intermediate bounds, only the
  output's backward pass optimized (the part the library's own alpha loop optimizes; here with the
  best iterate returned). Its reduction below CROWN is of the size the paper reports for its alpha-CROWN.
* "crown_lirpa_softmax": CROWN with the auto_LiRPA rule on auto_LiRPA's softmax graph
  exp(s_k - s_m) / sum_k exp(s_k - s_m) (m = the nominal argmax, the Div relaxed as a reciprocal and a
  product), to measure what our softmax construction changes; "alpha_crown_last_layer_lirpa_softmax":
  last-layer alpha-CROWN on that graph.

Soundness in floating point: all arithmetic is float64; the returned bound is raised by
ROUNDING_MARGIN (1 + |bound|): an estimated outward margin (rounding here is ~1e-16 relative to the
magnitudes involved), not a rigorous interval-arithmetic proof; far below any gap reported.
Status: "ok"; "nan: ..." (the bound is NaN or infinite, e.g. exp overflow at a huge radius);
"error: <exception>"; upper is NaN unless ok. All radii of a head are bounded in one call; if it
raises or leaves a bound non-finite, every radius is retried alone, so a failure stays with its radius.
`seconds` is the wall time of the call that produced the result (with shared work, `shared_relaxations`: the
method's own share) divided by the number of results it produced, plus the retry's share when retried.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from bound_propagation.bounds import LinearBounds

from attncert.baselines.adam_steps import AdamSteps
from attncert.baselines.box_input_set import CentredBox
from attncert.baselines.alpha_convergence import converged, ibp_clip, stage_width
from attncert.baselines.head_network import bound_head_network
from attncert.baselines.relaxation_parameters import DTYPE, alpha_parameters, clamp_alpha_parameters, set_alpha_key
from attncert.configuration.device import resolve_device
from attncert.head.problem import HeadProblem
from attncert.baselines.l2_input_set import PerTokenL2Ball

#: The baselines (all on the default grid; see docs/baselines.md for each one's auto_LiRPA counterpart).
METHODS = ("ibp", "crown", "crown_mid", "alpha_crown", "alpha_crown_last_layer", "crown_lirpa_softmax",
           "alpha_crown_last_layer_lirpa_softmax")
#: Methods available but not on the default grid (none at present).
EXTRA_METHODS: tuple[str, ...] = ()
#: Relative outward rounding added to every returned bound.
ROUNDING_MARGIN = 1e-9
#: Projected-Adam settings of alpha-CROWN (per stage).
ALPHA_ITERATIONS = 30
ALPHA_LR = 0.1
#: Convergence test of every alpha-CROWN stage (`_optimize_stage`): stop a bound once its best width
#: improved by at most ALPHA_TOLERANCE of itself over ALPHA_PATIENCE steps (config: baselines.alpha_*).
ALPHA_TOLERANCE = 1e-3
ALPHA_PATIENCE = 5
#: Adam's (beta1, beta2). beta1 = 0.5 (bound_propagation's own alpha default): with 0.9 the momentum
#: overshoots after the first steps and the bound stalls for ~10 steps before improving again, which
#: no stopping rule can tell from convergence (bench/bench_alpha_convergence.py).
ALPHA_BETAS = (0.5, 0.99)


@dataclass(frozen=True)
class MethodSpec:
    """How a method bounds: the algorithm, the CROWN relaxation rule, the softmax graph."""
    algorithm: str  # "ibp" | "crown" | "alpha_crown" | "alpha_crown_last_layer"
    relaxation: str = "auto_lirpa"  # relaxation_parameters.RELAXATION_RULES
    softmax: str = "reciprocal"  # head_network.SOFTMAX_GRAPHS


METHOD_SPECS = {
    "ibp": MethodSpec("ibp"),
    "crown": MethodSpec("crown", "auto_lirpa"),
    "crown_mid": MethodSpec("crown", "mid"),
    "alpha_crown": MethodSpec("alpha_crown", "auto_lirpa"),
    "alpha_crown_last_layer": MethodSpec("alpha_crown_last_layer", "auto_lirpa"),
    "crown_lirpa_softmax": MethodSpec("crown", "auto_lirpa", "auto_lirpa"),
    "alpha_crown_last_layer_lirpa_softmax": MethodSpec("alpha_crown_last_layer", "auto_lirpa", "auto_lirpa"),
}

_SOFTMAX = "softmax 1/sum_k exp(s_k - s_j)"
_LIRPA = "auto_LiRPA relaxations: one McCormick plane per side, exp tangent at min(mid, l+0.99)"
_LABELS = {
    "ibp": "IBP",
    "crown": f"CROWN ({_LIRPA}; {_SOFTMAX})",
    "crown_mid": f"CROWN (mid plane: McCormick planes averaged, tangents at the midpoint, bound_propagation defaults; "
                 f"{_SOFTMAX})",
    "alpha_crown": "alpha-CROWN (full: optimized intermediate bounds, per-objective slopes, best of {it} Adam "
                   "steps/stage, "
    f"started at the {_LIRPA.split(':')[0]}; {_SOFTMAX})",
    "alpha_crown_last_layer": "alpha-CROWN (last layer only: CROWN intermediate bounds, per-objective slopes, best of "
                              "{it} "
    f"Adam steps, started at the {_LIRPA.split(':')[0]}; {_SOFTMAX})",
    "crown_lirpa_softmax": f"CROWN ({_LIRPA}; auto_LiRPA softmax graph exp(s_k - s_m)/sum, m = nominal argmax)",
    "alpha_crown_last_layer_lirpa_softmax": "alpha-CROWN (last layer only: CROWN intermediate bounds, per-objective "
                                            "slopes, "
    "best of {it} Adam steps, started at the auto_LiRPA relaxations; auto_LiRPA "
    "softmax graph exp(s_k - s_m)/sum, m = nominal argmax)",
}


def _steps_phrase(alpha) -> str:
    """'{it}' of the labels: the iteration cap, and the convergence test when it is on (Adam's betas when
    they are not the default)."""
    betas = "" if tuple(alpha.betas) == ALPHA_BETAS else f" [betas {alpha.betas[0]:g}, {alpha.betas[1]:g}]"
    if alpha.patience <= 0:
        return f"{alpha.iterations}{betas}"
    return (f"<= {alpha.iterations}{betas} (a bound stops once its width improved <= {alpha.tolerance:g} of itself "
            f"over {alpha.patience} steps)")


def method_label(method: str, norm: str, alpha=None) -> str:
    """The method's label; alpha: AlphaSettings (default settings when None)."""
    if method not in _LABELS:
        raise ValueError(f"method must be one of {METHODS + EXTRA_METHODS}; got {method!r}")
    set_name = "box" if norm == "linf" else "per-token l2 ball (own input set)"
    it = _steps_phrase(AlphaSettings() if alpha is None else alpha)
    return f"{_LABELS[method].format(it=it)} [{set_name}, bound_propagation 0.4.7, float64]"


@dataclass(frozen=True)
class BaselineResult:
    upper: float
    seconds: float
    status: str
    label: str


# --------------------------------------------------------------------------------------------------
# Input sets
# --------------------------------------------------------------------------------------------------
def input_set(norm: str, radii: np.ndarray, n: int, d: int, device: torch.device | str = "cpu"):
    """The perturbation set for a batch of radii: x = delta in R^{n d}, batch shape (len(radii),), on `device`."""
    r = torch.as_tensor(np.asarray(radii, dtype=np.float64), dtype=DTYPE, device=device)
    center = torch.zeros(len(r), n * d, dtype=DTYPE, device=device)
    if norm == "linf":
        half = r[:, None].expand_as(center)
        return CentredBox(center - half, center + half)
    if norm == "l2":
        return PerTokenL2Ball(center, r, token_dim=d)
    raise ValueError(f"norm must be 'linf' or 'l2'; got {norm!r}")


# --------------------------------------------------------------------------------------------------
# The three methods on a bound network (output: upper bounds, shape (batch, m))
# --------------------------------------------------------------------------------------------------
@torch.no_grad()
def ibp_upper(bnet, region) -> torch.Tensor:
    return bnet.ibp(region).upper


@torch.no_grad()
def crown_upper(bnet, region) -> torch.Tensor:
    set_alpha_key(bnet, None)
    return bnet.crown(region, bound_lower=False, bound_upper=True).concretize().upper


def _better(new: torch.Tensor, best: torch.Tensor, smaller: bool) -> torch.Tensor:
    new = new.detach()
    ok = torch.isfinite(new)
    improves = (new < best) if smaller else (new > best)
    return torch.where(ok & (~torch.isfinite(best) | improves), new, best)


def _optimize_stage(bnet, key, evaluate, iterations: int, lr: float, tolerance: float = 0.0, patience: int = 0,
                    floor: torch.Tensor | None = None, betas: tuple[float, float] = ALPHA_BETAS):
    """Minimize sum(upper) - sum(lower) of evaluate() over the parameters of `key`; best iterate per bound.

    Convergence test (patience > 0; `alpha_convergence`), per bound o (an output of one unit; for an
    intermediate stage all neurons of one unit, batch row b, together): with w_o(t) the width of its best
    interval after iterate t, as handed on (`stage_width`: intersected with the IBP interval for a neuron,
    measured from the centre value for an output; summed over the unit's neurons), o stops at the first
    t >= patience with

        w_o(t - patience) - w_o(t) <= tolerance * w_o(t),

    and keeps best_o(t) from then on (later iterates are not looked at); the loop ends when every bound
    has stopped, or after `iterations` steps. Every unit has its own parameters and the loss is a sum,
    so a unit's iterates do not depend on the others: batching units changes neither its iterates nor
    its stopping step. patience = 0: no test, the best of all `iterations` steps.
    Returns (first result, best lower, best upper, steps taken).
    """
    set_alpha_key(bnet, key)
    steps = 0
    with torch.enable_grad():
        result = evaluate()
        bounds = result[0].concretize()
        best_lo = None if bounds.lower is None else bounds.lower.detach().clone()
        best_up = None if bounds.upper is None else bounds.upper.detach().clone()
        params = alpha_parameters(bnet, key)
        if params and iterations > 0:
            optimizer = AdamSteps(params, lr, tuple(betas))  # torch.optim.Adam's arithmetic (`adam_steps`)
            clip = ibp_clip(result, best_up if best_up is not None else best_lo) if floor is None else None
            widths = [stage_width(best_lo, best_up, floor, clip)] if patience > 0 else []
            stopped = torch.zeros_like(best_up if best_up is not None else best_lo, dtype=torch.bool)
            for t in range(1, iterations + 1):
                loss = 0.0
                if bounds.upper is not None:
                    loss = loss + bounds.upper.sum()
                if bounds.lower is not None:
                    loss = loss - bounds.lower.sum()
                if not torch.isfinite(loss):
                    break
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                clamp_alpha_parameters(params)
                bounds = evaluate()[0].concretize()
                steps = t
                if best_lo is not None:
                    best_lo = torch.where(stopped, best_lo, _better(bounds.lower, best_lo, smaller=False))
                if best_up is not None:
                    best_up = torch.where(stopped, best_up, _better(bounds.upper, best_up, smaller=True))
                if patience > 0:
                    widths.append(stage_width(best_lo, best_up, floor, clip))
                    if t >= patience:
                        dims = tuple(range(1, widths[t].dim())) if floor is None else ()  # neurons of a unit
                        stopped = stopped | converged(widths[t - patience], widths[t], tolerance, dims)
                        if bool(stopped.all()):
                            break
    set_alpha_key(bnet, None)
    return result, best_lo, best_up, steps


@torch.no_grad()
def _centre_value(bnet, region) -> torch.Tensor:
    """The network's value at the centre of the input set (a point of the set: a value attained)."""
    box = region.bounding_hyperrect()
    return bnet((box.lower + box.upper) / 2).detach()


def alpha_crown_upper(bnet, region, out_size: int, iterations: int = ALPHA_ITERATIONS, lr: float = ALPHA_LR,
                      optimize_intermediate: bool = True, tolerance: float = ALPHA_TOLERANCE,
                      patience: int = ALPHA_PATIENCE, steps_out: list | None = None,
                      betas: tuple[float, float] = ALPHA_BETAS, crown: torch.Tensor | None = None,
                      relaxed: bool = False) -> torch.Tensor:
    """Full alpha-CROWN upper bound (see the module docstring), never above CROWN's.

    optimize_intermediate=False keeps CROWN's intermediate bounds and optimizes only the output's
    backward pass ("alpha_crown_last_layer"). Every stage runs at most `iterations` Adam steps and stops
    early by the convergence test of `_optimize_stage` (tolerance, patience; patience 0: no test).
    steps_out, if given, receives the steps taken per stage (intermediate stages first, output last).
    crown: CROWN's bound `crown_upper(bnet, region)` when the caller has it (the full variant needs it).
    relaxed (last layer only): `bnet` already holds CROWN's relaxations (`bnet.crown_relax(region)`): the stages
    with no steps would set the same ones (their first iterate is CROWN's bound on every neuron).
    """
    # Last layer only: the output's first iterate is CROWN's bound itself (CROWN's intermediate bounds, the
    # rule's CROWN parameters), so no separate CROWN pass is needed; the full variant needs one.
    if crown is None and optimize_intermediate:
        crown = crown_upper(bnet, region)
    steps_out = [] if steps_out is None else steps_out
    try:
        bnet.propagate_size(region.size(-1))
        if not relaxed:
            with torch.no_grad():
                bnet.ibp_forward(region.bounding_hyperrect(), save_input_bounds=True)
        stage = 0
        while bnet.need_relaxation:
            result, lo, up, steps = _optimize_stage(bnet, ("stage", stage), lambda: bnet.backward_relaxation(region),
                                                    iterations if optimize_intermediate else 0, lr, tolerance, patience,
                                                    betas=betas)
            steps_out.append(steps)
            _, module, *extra = result
            # Hand the best per-neuron interval to the library's set_relaxation as a constant linear bound
            # (zero slope, intercept = bound); it intersects it with the IBP interval and relaxes on it.
            zero = torch.zeros((), dtype=lo.dtype, device=lo.device).expand(*lo.shape, region.size(-1))
            with torch.no_grad():
                module.set_relaxation(LinearBounds(region, (zero, lo), (zero, up)), *extra)
            stage += 1

        def output_bound():
            return (bnet.crown_backward(bnet.initial_linear_bounds(region, out_size, lower=False, upper=True), False),)

        centre = _centre_value(bnet, region) if patience > 0 else None
        first, _, best, steps = _optimize_stage(bnet, "output", output_bound, iterations, lr, tolerance, patience,
                                                centre, betas)
        steps_out.append(steps)
        if crown is None:
            crown = first[0].concretize().upper.detach()
    finally:
        bnet.clear_relaxation()
        set_alpha_key(bnet, None)
    return torch.where(torch.isfinite(best) & (best < crown), best, crown)


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------
def _group_key(p: HeadProblem):
    arrays = (p.W_Q, p.W_K, p.W_V, p.b_Q, p.b_K, p.b_V, p.Z0)
    return (tuple(a.tobytes() for a in arrays), p.Z0.shape, p.W_Q.shape, p.query_index, p.norm, p.mode)


def _round_up(u: float) -> float:
    return float(u + ROUNDING_MARGIN * (1.0 + abs(u)))


@dataclass(frozen=True)
class AlphaSettings:
    """Projected Adam of alpha-CROWN: at most `iterations` steps per stage, lr, and the convergence test
    (a bound stops once its best width improved by <= tolerance of itself over `patience` steps; 0: off)."""
    iterations: int = ALPHA_ITERATIONS
    lr: float = ALPHA_LR
    tolerance: float = ALPHA_TOLERANCE
    patience: int = ALPHA_PATIENCE
    betas: tuple[float, float] = ALPHA_BETAS


def bound_network(first: HeadProblem, spec_rows, radii, method: str, device: torch.device | str = "cpu"):
    """(bound network, input set) of one head for `method`, every tensor on `device`."""
    spec = METHOD_SPECS[method]
    _, bnet = bound_head_network(first, np.stack(spec_rows), relaxation=spec.relaxation, softmax=spec.softmax,
                                 device=device)
    return bnet, input_set(first.norm, np.array(radii), first.n, first.d, device)


def _bound_group(first: HeadProblem, spec_rows, radii, method: str, alpha: AlphaSettings, device) -> np.ndarray:
    """Upper bounds (len(radii), m) of one head (the specifications as objectives, the radii as batch)."""
    spec = METHOD_SPECS[method]
    bnet, region = bound_network(first, spec_rows, radii, method, device)
    if spec.algorithm == "ibp":
        upper = ibp_upper(bnet, region)
    elif spec.algorithm == "crown":
        upper = crown_upper(bnet, region)
    else:
        upper = alpha_crown_upper(bnet, region, len(spec_rows), alpha.iterations, alpha.lr,
                                  optimize_intermediate=(spec.algorithm == "alpha_crown"),
                                  tolerance=alpha.tolerance, patience=alpha.patience, betas=alpha.betas)
    return upper.detach().cpu().numpy()


def group_inputs(problems: list[HeadProblem], indices: list[int]):
    """(first problem, distinct specification rows in order, sorted distinct radii) of the units `indices` of one
    network (one `_group_key`): the objectives and the batch of their shared call."""
    rows = {problems[i].c.tobytes(): problems[i].c for i in indices}
    return problems[indices[0]], list(rows.values()), sorted({problems[i].radius for i in indices})


def _error_status(e: Exception) -> str:
    return f"error: {type(e).__name__}: {e}"


def baseline_upper_bounds(problems: list[HeadProblem], method: str, *, alpha_iterations: int = ALPHA_ITERATIONS,
                          alpha_lr: float = ALPHA_LR, alpha_tolerance: float = ALPHA_TOLERANCE,
                          alpha_patience: int = ALPHA_PATIENCE, alpha_betas: tuple[float, float] = ALPHA_BETAS,
                          device: str | torch.device | None = None,
                          precomputed: dict | None = None) -> list[BaselineResult]:
    """Upper bounds for several units; units that differ only in c and radius share one network call
    (specifications become objectives, radii the batch dimension).

    alpha_*: the alpha-CROWN settings (`AlphaSettings`). device: 'cpu' (default), 'cuda', 'cuda:N'
    (`attncert.configuration.device.resolve_device`; an absent GPU raises DeviceError, never a per-unit status).

    precomputed: {`_group_key`: (upper bounds, seconds)} of groups whose call was made already
    (`shared_relaxations`). If that call fails (an exception) or leaves any bound non-finite, every radius is
    bounded again on its own, so one radius can never erase the others (otherwise an exception in a batched
    call would lose the whole head; for alpha-CROWN a non-finite radius also stalls the shared optimization loss).
    """
    if method not in METHOD_SPECS:
        raise ValueError(f"method must be one of {METHODS + EXTRA_METHODS}; got {method!r}")
    dev = resolve_device(device)
    alpha = AlphaSettings(int(alpha_iterations), float(alpha_lr), float(alpha_tolerance), int(alpha_patience),
                          (float(alpha_betas[0]), float(alpha_betas[1])))
    groups: dict = {}
    for idx, p in enumerate(problems):
        groups.setdefault(_group_key(p), []).append(idx)
    results: list[BaselineResult | None] = [None] * len(problems)
    for key, indices in groups.items():
        first, spec_rows, radii = group_inputs(problems, indices)
        specs = [c.tobytes() for c in spec_rows]
        label = method_label(method, first.norm, alpha)
        t0 = time.perf_counter()
        errors = [None] * len(radii)
        if precomputed is not None and key in precomputed:  # (upper, seconds) of `_bound_group`, computed shared
            upper, elapsed = precomputed[key]
        else:
            try:
                upper = _bound_group(first, spec_rows, radii, method, alpha, dev)
            except Exception as e:  # noqa: BLE001 - retried per radius below, then reported as a status
                upper, errors = None, [_error_status(e)] * len(radii)
            elapsed = time.perf_counter() - t0
        shared = elapsed / len(indices)
        extra = [0.0] * len(radii)  # retry seconds per unit at that radius
        if len(radii) > 1 and (upper is None or not np.all(np.isfinite(upper))):
            upper = np.full((len(radii), len(spec_rows)), np.nan) if upper is None else upper.copy()
            for k, r in enumerate(radii):
                t1 = time.perf_counter()
                try:
                    upper[k] = _bound_group(first, spec_rows, [r], method, alpha, dev)[0]
                    errors[k] = None
                except Exception as e:  # noqa: BLE001
                    upper[k], errors[k] = np.nan, _error_status(e)
                extra[k] = (time.perf_counter() - t1) / len(spec_rows)
        for i in indices:
            p = problems[i]
            k = radii.index(p.radius)
            seconds = shared + extra[k]
            if errors[k] is not None:
                results[i] = BaselineResult(float("nan"), seconds, errors[k], label)
                continue
            u = float(upper[k, specs.index(p.c.tobytes())])
            if np.isfinite(u):
                results[i] = BaselineResult(_round_up(u), seconds, "ok", label)
            else:
                results[i] = BaselineResult(float("nan"), seconds, "nan: the bound is not finite (overflow)", label)
    return results


def baseline_upper_bound(problem: HeadProblem, method: str, **kwargs) -> BaselineResult:
    """A sound upper bound on max g over the perturbation set by one of METHODS + EXTRA_METHODS."""
    return baseline_upper_bounds([problem], method, **kwargs)[0]
