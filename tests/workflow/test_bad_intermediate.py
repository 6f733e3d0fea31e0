"""A job handed a damaged intermediate stops before any computation with one line naming the file and the
command that regenerates it, and no traceback: the certify_layer entry script on a truncated extracted layer."""
import subprocess
import sys

from conftest import REPO
from intermediate_files import write_extracted  # tests/intermediate_files.py

# what Snakemake hands the script as `snakemake`, for one certify_layer job on data/extract/m/layer0.npz
RUN_JOB = """
import runpy, sys
from types import SimpleNamespace as NS
params = NS(model={"name": "m", "source": "embedded", "family": "bert"}, heads=[0], prompts=[0], query_positions=[2],
            radii=[0.01], norms=["linf"], modes=["fixed"], ascent_restarts=1, ascent_steps=5, seed=0,
            second_order=True, tight=False, ascent_check_fraction=0.0, varying={}, device="cpu", spec_seed=0, code="x")
sm = NS(input=NS(npz="data/extract/m/layer0.npz"), params=params, threads=1, wildcards=NS(layer="0"),
        output=NS(csv="data/certify/m/layer0.csv", spec="data/certify/m/layer0_spec.npz"),
        log=["data/logs/m/certify/layer0.log"])
runpy.run_path(sys.argv[1], init_globals={"snakemake": sm}, run_name="__main__")
"""


def test_certify_layer_on_a_truncated_layer_prints_one_line_and_computes_nothing(tmp_path):
    path = write_extracted(tmp_path)
    full = path.stat().st_size
    path.write_bytes(path.read_bytes()[:100])
    res = subprocess.run([sys.executable, "-c", RUN_JOB, str(REPO / "workflow" / "scripts" / "certify_layer.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    line = (
        f"attncert: data/extract/m/layer0.npz is corrupted (100 bytes, its sidecar layer0.npz.json records {full}): "
        "regenerate it with: snakemake --cores all data/extract/m/layer0.npz --forcerun extract"
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == line
    assert line in (tmp_path / "data/logs/m/certify/layer0.log").read_text()
    assert not (tmp_path / "data/certify").exists()  # the specification, written before any solver, was not
