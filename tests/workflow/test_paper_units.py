"""The paper configuration computes exactly the paper's unit counts (bench/paper_units.py, a dry run)."""
from bench import paper_units
from conftest import REPO


def _paper_units():
    return paper_units


def test_paper_config_unit_counts():
    pu = _paper_units()
    c = pu.unit_counts(pu.load_config(REPO / "workflow" / "config" / "paper.yaml"))
    assert (c["layers"], c["heads"]) == (12, 12)
    assert c["certify_fixed"] == 17280 == 144 * 4 * 5 * 6          # one (fixed) query mode per unit
    assert {qp: m["fixed"] for qp, m in c["certify_by_position"].items()} == {1: 4320, 4: 4320, 8: 4320, 15: 4320}
    assert c["certify_varying"] == 2880 and c["certify_by_position"][4]["varying"] == 2880
    assert c["certify_fixed_qp4_baseline_radii"] == 2880
    assert c["baselines"] == 5760 and c["baselines_fixed"] == c["baselines_varying"] == 2880
    assert c["baselines_certified"]                                   # compared unit by unit
    assert c["block"] == 132 and c["block_transitions"] == 11
    assert c["minip_runs"] == 715
    text = "\n".join(pu.report(c))
    assert "| certification | fixed-query units (exact + first + second order) | 17,280 | 17,280 | match |" in text


def test_default_config_grid_is_unchanged():
    pu = _paper_units()
    c = pu.unit_counts(pu.load_config(REPO / "workflow" / "config" / "default.yaml"))
    assert (c["certify_fixed"], c["certify_varying"], c["baselines"], c["block"]) == (864, 864, 576, 60)


def test_it_prints_only_unless_told_to_write(tmp_path):
    """`python -m bench.paper_units` prints; the committed result files are rewritten only with --write."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "bench.paper_units", "--results", str(tmp_path)]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and "17,280" in res.stdout and not list(tmp_path.iterdir()), res.stderr[-2000:]
    res = subprocess.run(cmd + ["--write"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0 and (tmp_path / "paper_units.md").is_file() and (tmp_path / "paper_units.json").is_file()
