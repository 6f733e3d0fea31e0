"""examples/certify_own_head.py runs as the README shows it, on a fresh clone (no pipeline outputs), goes
through the checked library path (`attncert.checkpoint`) and what it prints is sound: exact bracket <= tight
second order <= second order <= first order, CROWN above the bracket. Bad input: one line, exit 2."""
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

EXAMPLE = REPO / "examples" / "certify_own_head.py"


def _run(*args, cwd):
    return subprocess.run([sys.executable, str(EXAMPLE), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1"))


@pytest.mark.slow
def test_the_example_runs_from_the_command_line(tmp_path):
    # run from an empty directory: the example must need no data/ or figures/ of a run
    res = _run("--layer", "1", "--head", "3", "--radius", "0.005", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    v = {k: float(x) for k, x in re.findall(r"^\s+(\w+)\s+(-?[\d.e+-]+)$", res.stdout, re.M)}
    assert set(v) >= {"nominal", "exact_lo", "exact_hi", "first_order", "second_order", "second_order_tight",
                      "crown"}, res.stdout
    assert v["nominal"] <= v["exact_lo"] <= v["exact_hi"] <= v["second_order_tight"]
    assert v["exact_hi"] <= v["second_order"] <= v["first_order"] and v["exact_hi"] <= v["crown"]


@pytest.mark.parametrize("args, names", [(["--head", "12"], "--head 0..11"), (["--layer", "6"], "--layer 0..5")])
def test_out_of_range_heads_and_layers_give_one_line(tmp_path, args, names):
    res = _run(*args, cwd=tmp_path)
    assert res.returncode == 2
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and names in err[0] and "nan" not in res.stdout, res.stderr


def test_the_example_uses_the_checked_library_path():
    text = EXAMPLE.read_text()
    assert "checkpoint_head" in text and "head_bounds" in text
    assert "from_pretrained" not in text and "[:, cols]" not in text  # no weights sliced by hand
