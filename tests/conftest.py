"""Shared fixtures: tiny randomly initialised models saved as local `from_pretrained` folders."""
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))  # the environment's own snakemake

# One hypothesis policy for every property test: no per-example deadline (examples solve convex programs
# or train small models, and the 2 cores are shared, so wall time per example is not a property of the
# code). Tests set their own example counts; none sets a deadline (tests/test_hypothesis_policy.py).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("attncert", deadline=None)
_hypothesis_settings.load_profile("attncert")

from attncert.model.tiny_model import save_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny_gpt2"), "gpt2")


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """The finished tiny Snakemake run every xdist worker shares (tests/tiny_run.py); tests copy it
    (`tiny_run.copy_tiny_run`) before they run anything in it."""
    from tiny_run import build_tiny_run

    base = tmp_path_factory.getbasetemp()
    return build_tiny_run(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny_bert"), "bert")


try:  # threaded OpenBLAS makes small numpy/scipy calls (e.g. L-BFGS-B) ~20x slower on a busy 2-core machine
    from threadpoolctl import threadpool_limits
except ImportError:  # slower, and certificates can differ in their last bits (the pipeline runs at one thread)
    import contextlib

    def threadpool_limits(limits=None):
        return contextlib.nullcontext()


@pytest.fixture(autouse=True, scope="session")
def _single_threaded_blas():
    with threadpool_limits(1):
        yield




@pytest.fixture(scope="module")
def one_torch_thread():
    """2 shared cores: tiny torch batches (ascent, bound propagation) run faster and steadier on one
    intra-op thread; modules opt in with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


#: The longest tests (about 25-110 s each on two cores), started first: a worker that reaches one of them last
#: keeps the run going while the other idles. pytest-xdist deals the first quarter of the items out alternately,
#: so this order also splits them between the two workers. Any test not listed keeps its place after these.
LONGEST_FIRST = (
    "workflow/test_slurm_profile.py::test_profile_runs_reduced_dag_on_slurm_like_a_local_run",
    "workflow/test_dag_end_to_end.py::test_long_context_target_on_tiny_gpt2",
    "workflow/test_dag_end_to_end.py::test_tiny_gpt2_certify_and_baselines",  # builds the shared tiny run
    "workflow/test_dag_end_to_end.py::test_interrupted_run_resumes",
    "checkpoint/test_certify_command.py::test_the_readme_commands_run_as_written",
    "workflow/test_own_checkpoint.py::test_long_context_on_a_small_causal_checkpoint_attends_to_every_key",
    "provenance/test_run_archive.py::test_an_archived_run_is_up_to_date_in_a_fresh_clone_until_its_code_changes",
    "certify/test_exact_worst_case.py::test_exact_matches_dense_grid_in_2d",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.removeprefix("tests/"), len(rank)))  # stable for the rest
