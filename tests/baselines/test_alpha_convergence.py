"""alpha-CROWN's convergence test (tolerance, patience, iteration cap) and the `device` setting of the
baselines: the stopping rule's semantics, soundness of every early-stopped bound, and the tensors'
device."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attncert.baselines import linear_bound_baselines as lbb
from attncert.baselines.alpha_convergence import converged, stage_width
from attncert.baselines.linear_bound_baselines import (AlphaSettings, alpha_crown_upper, baseline_upper_bound,
                                                       baseline_upper_bounds, bound_network, crown_upper, method_label)
from attncert.baselines.op_linear import InputLinear
from attncert.head.problem import random_head_problem
from attncert.configuration.device import DeviceError

from test_linear_bound_baselines import sampled_max

ALPHA_METHODS = [m for m, s in lbb.METHOD_SPECS.items() if s.algorithm.startswith("alpha_crown")]
LAST_LAYER = [m for m, s in lbb.METHOD_SPECS.items() if s.algorithm == "alpha_crown_last_layer"]
RADII = [0.01, 0.03, 0.1]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def _problem(mode: str, seed: int = 3):
    return random_head_problem(np.random.default_rng(seed), d=6, d_head=4, n=4, radius=0.1, mode=mode, scale=1.5)


def _run(p, method, radii=RADII, **kw):
    """(upper bounds (len(radii),), steps per stage) of one alpha-CROWN call."""
    bnet, region = bound_network(p, [p.c], radii, method)
    steps = []
    optimize_intermediate = lbb.METHOD_SPECS[method].algorithm == "alpha_crown"
    up = alpha_crown_upper(bnet, region, 1, optimize_intermediate=optimize_intermediate, steps_out=steps, **kw)
    return up[:, 0].numpy(), steps


def test_converged_rule():
    """gain = w_old - w <= tolerance |w|; a bound that just became finite has not converged, one that stays
    infinite has."""
    inf = torch.inf
    w_old = torch.tensor([1.0, 1.0, 1.0, inf, inf, 0.0])
    w = torch.tensor([0.9999, 0.99, 1.0, 2.0, inf, 0.0])
    got = converged(w_old, w, 1e-3)
    assert got.tolist() == [True, False, True, False, True, True]
    assert converged(w_old, w, 0.0).tolist() == [False, False, True, False, True, True]
    # summed over a unit's neurons: gains 1e-4 + 1e-2 against widths 0.9999 + 0.99
    two = converged(w_old[None, :2], w[None, :2], 1e-3, dims=(1,))
    assert two.shape == (1, 1) and not bool(two) and bool(converged(w_old[None, :2], w[None, :2], 1e-2, dims=(1,)))


def test_width_of_an_intermediate_bound_is_clipped_to_ibp():
    lo, up = torch.tensor([-2.0, 0.0]), torch.tensor([3.0, 1.0])
    clip = (torch.tensor([-1.0, -1.0]), torch.tensor([1.0, 2.0]))
    assert stage_width(lo, up, None, clip).tolist() == [2.0, 1.0]
    assert stage_width(None, up, torch.tensor([0.5, 0.5])).tolist() == [2.5, 0.5]


@pytest.mark.parametrize("mode", ["fixed", "varying"])
@pytest.mark.parametrize("method", ALPHA_METHODS)
def test_early_stopped_bounds_are_sound_and_below_crown(mode, method):
    p = _problem(mode)
    bnet, region = bound_network(p, [p.c], RADII, method)
    crown = crown_upper(bnet, region)[:, 0].numpy()
    for tol, pat in ((1e-4, 3), (1e-2, 1), (1.0, 2)):
        up, steps = _run(p, method, iterations=30, tolerance=tol, patience=pat)
        assert max(steps) <= 30
        for k, r in enumerate(RADII):
            assert up[k] >= sampled_max(p.with_radius(r), np.random.default_rng(5), k=4000) - 1e-12
            assert up[k] <= crown[k] + 1e-12


@pytest.mark.parametrize("method", LAST_LAYER)
def test_stopping_rule_counts_steps(method):
    """patience 0: exactly the cap; tolerance 1 (any progress below 100% of the width counts as none):
    the output stops at exactly `patience` steps; the best of a prefix of the same trajectory is never
    below the best of the whole trajectory (last layer: one optimized stage)."""
    p = _problem("varying")
    full, steps_full = _run(p, method, iterations=12, patience=0)
    assert steps_full[-1] == 12 and all(s == 0 for s in steps_full[:-1])
    early, steps_early = _run(p, method, iterations=12, tolerance=1.0, patience=2)
    assert steps_early[-1] == 2
    assert np.all(early >= full) and np.any(early > full)
    mid, steps_mid = _run(p, method, iterations=12, tolerance=0.0, patience=12)
    assert steps_mid[-1] == 12 and np.array_equal(mid, full)


def test_intermediate_stages_stop_when_the_ibp_clipped_interval_stops_changing():
    """Fixed query: every stage of full alpha-CROWN stops before the cap on this head, and the result is
    within 1% of the gap of the 30-step bound (a guard against stopping at the start, not the bench's
    median criterion)."""
    p = _problem("fixed")
    full, _ = _run(p, "alpha_crown", iterations=30, patience=0)
    early, steps = _run(p, "alpha_crown", iterations=30, tolerance=1e-4, patience=3)
    assert max(steps) < 30
    ref = np.array([sampled_max(p.with_radius(r), np.random.default_rng(5), k=4000) for r in RADII])
    assert np.all((early - full) <= 1e-2 * (full - ref) + 1e-12)


@pytest.mark.parametrize("method", ALPHA_METHODS)
def test_batched_equals_single_under_the_convergence_test(method):
    """Each bound stops on its own and keeps its best from then on: grouping units changes nothing."""
    p = _problem("varying", seed=8)
    problems = [p.with_radius(r) for r in RADII] + [p.negated()]
    kw = dict(alpha_iterations=20, alpha_tolerance=1e-3, alpha_patience=2)
    batched = baseline_upper_bounds(problems, method, **kw)
    for q, r in zip(problems, batched):
        assert r.upper == pytest.approx(baseline_upper_bound(q, method, **kw).upper, rel=1e-9, abs=1e-12)


def test_label_names_the_stopping_rule():
    on = method_label("alpha_crown", "linf", AlphaSettings(30, 0.1, 1e-4, 3))
    off = method_label("alpha_crown", "linf", AlphaSettings(30, 0.1, 1e-4, 0))
    assert "best of <= 30 (a bound stops once its width improved <= 0.0001 of itself over 3 steps)" in on
    assert "best of 30 Adam" in off


# ---------------------------------------------------------------------------------------------
# device
# ---------------------------------------------------------------------------------------------
def _tensors(bnet, region):
    out = [t for t in bnet.parameters()] + [t for t in bnet.buffers()]
    for m in bnet.modules():
        if isinstance(m, InputLinear):
            out += [t for ts in (m.token_rows, m.token_inverse, m.token_blocks) for t in ts if t is not None]
    box = region.bounding_hyperrect()
    return out + [box.lower, box.upper]


@pytest.mark.parametrize("method", ["crown", "alpha_crown", "alpha_crown_last_layer_lirpa_softmax"])
@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_device_reaches_every_tensor(method, mode):
    """On the `meta` device (tensors without data, present in every torch build) every tensor of the bound
    network -- parameters, buffers, InputLinear's per-token blocks -- and of the box input set must
    follow the setting (the library's data-dependent checks keep a whole pass from running there)."""
    p = random_head_problem(np.random.default_rng(2), d=4, d_head=3, n=3, radius=0.1, mode=mode)
    bnet, region = bound_network(p, [p.c], [0.01, 0.1], method, device="meta")
    tensors = _tensors(bnet, region)
    assert len(tensors) > 10 and all(t.device.type == "meta" for t in tensors)
    bnet, region = bound_network(p, [p.c], [0.01, 0.1], method, device="cpu")
    assert all(t.device.type == "cpu" for t in _tensors(bnet, region))
    assert np.isfinite(crown_upper(bnet, region).numpy()).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_missing_cuda_stops_the_baselines_with_one_line():
    p = _problem("fixed")
    with pytest.raises(DeviceError) as info:  # raised, not a per-unit "error: ..." status
        baseline_upper_bounds([p], "alpha_crown", device="cuda")
    assert "\n" not in str(info.value) and "fix: set device: cpu" in str(info.value)


def test_cpu_device_gives_the_default_result():
    p = _problem("varying")
    a = baseline_upper_bound(p, "alpha_crown", alpha_iterations=5, device="cpu")
    b = baseline_upper_bound(p, "alpha_crown", alpha_iterations=5)
    assert a.upper == b.upper and a.status == "ok"
