"""examples/certify_own_head.py runs as the README shows it, on a fresh clone (no pipeline outputs), and
what it prints is sound: exact bracket <= second order <= first order, every sampled feasible value below."""
import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from attncert.head.ball_samples import feasible_perturbations
from conftest import REPO

EXAMPLE = REPO / "examples" / "certify_own_head.py"


def _module():
    spec = importlib.util.spec_from_file_location("certify_own_head", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_the_example_runs_from_the_command_line(tmp_path):
    # run from an empty directory: the example must need no data/ or figures/ of a run
    res = subprocess.run([sys.executable, str(EXAMPLE), "--layer", "1", "--head", "3", "--radius", "0.005"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert res.returncode == 0, res.stderr[-3000:]
    vals = dict(re.findall(r"^\s+(\w+)\s+(-?[\d.e+-]+)$", res.stdout, re.M))
    v = {k: float(x) for k, x in vals.items()}
    assert set(v) >= {"nominal", "exact_lo", "exact_hi", "first_order", "second_order", "crown"}, res.stdout
    assert v["nominal"] <= v["exact_lo"] <= v["exact_hi"] <= v["second_order"] <= v["first_order"]
    assert v["exact_hi"] <= v["crown"]


@pytest.mark.parametrize("mode", ["fixed", "varying"])
def test_the_example_certificates_are_sound(mode):
    mod = _module()
    p = mod.build_problem(layer=2, head=5, radius=0.002, mode=mode)
    assert p.W_Q.shape == (384, 32) and p.Z0.shape == (8, 384)
    res = mod.certify(p)
    D = feasible_perturbations(p, np.random.default_rng(0), k=50)
    sampled = max(p.value(p.Z0 + d) for d in D)  # feasible values: lower bounds of max g
    assert sampled <= res["second_order"] <= res["first_order"] + 1e-12
    assert sampled <= res["crown"]
    if mode == "fixed":
        assert sampled <= res["exact_lo"] <= res["exact_hi"] <= res["second_order"]
