"""One tiny Snakemake run on a random GPT-2, built once per test session and copied by the tests that read it.

The end-to-end tests of the DAG (the tables, the report, editing a stage, a damaged layer) all start from the
same finished run: two layers, one head, two prompts, certification, baselines, the certification figures and
report pages, and the cheapest Min-IP job; it is built once for all of them. The pytest-xdist workers share it
through a file lock in the session's common temporary directory: the first worker to ask builds it, the others
wait for it, and a failed build is not marked complete, so the next caller builds it again and sees the failure
itself. Every test works on its own copy
(`copy_tiny_run`, file times kept), so no test sees another's edits or Snakemake lock.
"""
import os
import shutil
import subprocess
from pathlib import Path

import yaml
from filelock import FileLock

from attncert.baselines.linear_bound_baselines import METHODS
from attncert.certify.figure_names import FIGURE_NAMES as CERTIFY_FIGURES
from attncert.model.tiny_model import save_tiny_model
from conftest import REPO, SNAKEMAKE


#: what the shared run builds: the tables, every certification figure and its report pages, one Min-IP job
TARGETS = (
    "figures/tables/tiny-gpt2/certification.md", "figures/tables/tiny-gpt2/baselines.md",
    "figures/certify/tiny-gpt2/relative_gap_vs_radius.pdf",
    *(f"figures/certify/tiny-gpt2/{n}.png" for n in CERTIFY_FIGURES),
    *(f"figures/report/tiny-gpt2/{n}.html" for n in ("certification", "certification_slopes")),
    "data/minip/default/constructions.csv",
)
CONFIG = "tiny.yaml"
_COMPLETE = ".tiny_run_complete"


def tiny_workdir(tmp_path: Path, model_dir: Path, **overrides) -> tuple[Path, Path]:
    """A run directory with the committed inputs and `tiny.yaml`: the default config on the tiny model, two
    layers, one head, three radii; `overrides` replace top-level keys. Returns (directory, config path)."""
    (tmp_path / "data").mkdir(exist_ok=True)
    for f in ("prompts.txt", "paper_claims.yaml"):
        shutil.copy(REPO / "data" / f, tmp_path / "data" / f)
    cfg = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
    cfg["model"] = {"name": "tiny-gpt2", "family": "gpt2", "source": str(model_dir)}
    cfg.update(n_prompts=2, max_tokens=6, layers=[0, 1], heads=[1])
    cfg["certify"].update(query_positions=[3], radii=[0.001, 0.003, 0.01], ascent_restarts=3, ascent_steps=40)
    cfg["baselines"].update(query_positions=[3], radii=[0.001, 0.01], methods=list(METHODS))
    cfg["minip"]["constructions"]["max_bits"] = 2  # the cheapest Min-IP job: the exhaustive checks for m <= 2
    cfg.update(overrides)
    path = tmp_path / CONFIG
    path.write_text(yaml.safe_dump(cfg))
    return tmp_path, path


def run_snakemake(workdir, configfile, *targets, extra=(), timeout=900, code=REPO, **popen):
    """`snakemake` on the Snakefile and sources of `code` (the repository, or a copy of it) in `workdir`, two cores;
    the completed process."""
    cmd = [SNAKEMAKE, "--snakefile", str(code / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(configfile), "--cores", "2", *extra, *targets]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(code / "src"))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **popen)


def build_tiny_run(shared: Path) -> Path:
    """The finished shared run under `shared` (built by the first caller, under a lock); its directory."""
    run = shared / "tiny_run"
    with FileLock(str(shared / "tiny_run.lock")):
        if not (run / _COMPLETE).is_file():
            if run.exists():  # a failed earlier build: start again
                shutil.rmtree(run)
            run.mkdir(parents=True)
            model = save_tiny_model(shared / "tiny_run_model", "gpt2")
            _, cfg = tiny_workdir(run, model)
            res = run_snakemake(run, cfg, *TARGETS)
            if res.returncode != 0:
                raise RuntimeError(f"the shared tiny run failed:\n{res.stderr[-4000:]}")
            (run / _COMPLETE).write_text("")
    return run


def copy_tiny_run(shared_run: Path, dst: Path) -> tuple[Path, Path]:
    """A private copy of the shared run (file times kept, so Snakemake sees it up to date); (directory, config).
    The config names the shared model directory, which stays in place for the session."""
    shutil.copytree(shared_run, dst, symlinks=True, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(_COMPLETE))
    return dst, dst / CONFIG
