"""The `device` setting: cpu by default, cuda only when torch sees it, else one line naming the fix."""
import numpy as np
import pytest
import torch

from attncert.certify.best_feasible_ascent import best_feasible_ascent
from attncert.certify.run import certify_unit
from attncert.head.problem import random_head_problem
from attncert.configuration.device import DeviceError, resolve_device


def test_cpu_is_the_default():
    assert resolve_device(None) == torch.device("cpu") == resolve_device("cpu") == resolve_device(torch.device("cpu"))


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "tpu"])
def test_unknown_device_is_one_line(name):
    with pytest.raises(DeviceError) as info:
        resolve_device(name)
    assert "\n" not in str(info.value) and "fix: use cpu, cuda or cuda:N" in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_missing_cuda_is_one_line_and_stops_a_unit():
    for name in ("cuda", "cuda:1"):
        with pytest.raises(DeviceError) as info:
            resolve_device(name)
        msg = str(info.value)
        assert "\n" not in msg and "fix: set device: cpu" in msg
    p = random_head_problem(np.random.default_rng(0), d=4, d_head=2, n=3, radius=0.05, mode="varying")
    with pytest.raises(DeviceError):  # not recorded as a per-unit failure: the job stops
        certify_unit(p, ascent_restarts=2, ascent_steps=5, device="cuda")


def test_ascent_on_the_configured_device():
    p = random_head_problem(np.random.default_rng(1), d=4, d_head=2, n=3, radius=0.05, mode="varying")
    a = best_feasible_ascent(p, restarts=4, steps=20, device="cpu")
    b = best_feasible_ascent(p, restarts=4, steps=20)
    assert a.value == b.value and p.in_ball(a.Z)
