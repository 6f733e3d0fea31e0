# Shared set-up: config validation (at parse time), model and grid selection, logging/benchmark paths.
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.join(workflow.basedir, "src"))

# One BLAS/OpenMP thread per job: jobs run side by side and set torch's threads from `threads:`;
# oversubscribed BLAS makes the many small solves of the certificates 10-20x slower.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from attncert.provenance.code_hash import code_hash
from attncert.configuration.config import ConfigError, fit_to_model, read_prompts, selected, validate_config
from attncert.model.model_source import ModelSourceError, check_reachable, model_dimensions
from attncert.provenance.run_identity import apply_model_source, check_no_other_model, remove_own_orphan_sidecars

# `--config model_source=DIR` runs on a local checkpoint under its own name (the directory's, unless the user's
# config gives model.name) and family (read from the checkpoint, unless given): attncert.provenance.run_identity.
# `--config model_source=random-gpt2` switches to the SYNTHETIC GPT-2-shaped model (name random-gpt2).
try:
    with open(os.path.join(workflow.basedir, "workflow", "config", "default.yaml")) as _fh:
        _defaults = yaml.safe_load(_fh)
    apply_model_source(config, workflow.config_settings.overwrite_config.get("model"), _defaults["model"])
except ModelSourceError as _e:
    raise SystemExit(f"attncert: {_e}")
if config.get("model", {}).get("source") in ("embedded", "random-gpt2"):  # both read only local files
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

try:
    validate_config(config, base_dir=workflow.basedir)
    # a small checkpoint: the long-context defaults fitted to the model, said in one line (workflow/config/README.md)
    _fitted = fit_to_model(config, _defaults)
    check_no_other_model(config["model"])  # outputs under this run's name belong to this model only
except ConfigError as _e:
    raise SystemExit(f"attncert: {_e}")
if _fitted:
    print(f"attncert: {_fitted}", file=sys.stderr)

MODEL = config["model"]["name"]
MODEL_PATTERN = re.escape(MODEL)  # the only value of the {model} wildcard (Snakefile: wildcard_constraints)
MODEL_CFG = dict(config["model"])  # a params entry of every job that reads or labels the model
_dims = model_dimensions(config["model"]) or (12, 12)
LAYERS = selected(config, "layers", _dims[0])
HEADS = selected(config, "heads", _dims[1])


onstart:
    # Stops a real run (not a dry run) before any job when the weights cannot be reached or the texts are too short
    # for the model's tokenizer.
    try:
        check_reachable(config["model"])
        from attncert.model.extraction import check_texts

        _lc = config.get("long_context") or {}
        _passage = open(_lc["passage"], encoding="utf-8").read() if os.path.isfile(_lc.get("passage", "")) else None
        check_texts(config["model"], read_prompts(config["prompts"], config["n_prompts"]), config["max_tokens"],
                    _passage, max(_lc.get("lengths", [0])))
    except (ModelSourceError, ValueError) as _e:
        print(f"attncert: {_e}", file=sys.stderr)
        raise SystemExit(1)
    remove_own_orphan_sidecars(MODEL, config["minip"]["name"])


# Snakemake removes the outputs of a failed or interrupted job, not their `.json` sidecars: drop those (this
# run's model's and Min-IP grid's; another model's or grid's folders are left alone).
onsuccess:
    remove_own_orphan_sidecars(MODEL, config["minip"]["name"])


onerror:
    remove_own_orphan_sidecars(MODEL, config["minip"]["name"])


def log_path(stage, name):
    return f"data/logs/{MODEL}/{stage}/{name}.log"


def bench_path(stage, name):
    return f"benchmarks/{MODEL}/{stage}/{name}.tsv"


def code(script):
    """params entry: hash of an entry script and every package module it imports (see
    attncert.provenance.code_hash), so editing a stage's source reruns that stage and its dependents."""
    return code_hash(os.path.join(workflow.basedir, "workflow", "scripts", script))


# Each rule's priority: the measured seconds of the longest chain of jobs from one of its jobs to the end of the run
# (workflow/config/job_seconds.yaml, written by `python -m bench.job_seconds RUN_DIR --write` from a finished run's
# benchmark files). Snakemake starts the ready job of the highest priority first: the jobs heading the longest
# chains (certification, long-context parts, the audit's pieces) start before the short ones that end the DAG.
with open(os.path.join(workflow.basedir, "workflow", "config", "job_seconds.yaml")) as _fh:
    _JOB_SECONDS = (yaml.safe_load(_fh) or {}).get("rules", {})


def priority_of(rule):
    """`priority:` of a rule's jobs (an int; 0 for a rule the cost file does not list yet)."""
    return int(_JOB_SECONDS.get(rule, {}).get("priority", 0))


def audit_part_inputs(wc):
    """The files one piece of the certificate audit reads (besides the run's recorded configuration): the block
    table alone for its own checks; the table, one transition's certificates and its two layers' weights for a
    transition's piece (`block{T}`)."""
    if wc.audit_part == "long_context":
        return [f"data/long_context/{wc.model}/{name}" for name in
                ("units.csv", "units_certificates.npz", "layer_tokens.npz")] if LC else []
    if wc.audit_part == "block":
        return [f"data/block/{wc.model}/units.csv"] if BLOCK_TRANSITIONS else []
    if wc.audit_part.startswith("block"):
        T = int(wc.audit_part.removeprefix("block"))
        return [f"data/block/{wc.model}/units.csv", f"data/block/{wc.model}/transition{T}_certificates.npz"] + [
            f"data/extract/{wc.model}/layer{L}.npz" for L in (T, T + 1)]
    layer = wc.audit_part.removeprefix("layer")
    return [f"data/certify/{wc.model}/layer{layer}{suffix}" for suffix in (".csv", "_certificates.npz", "_spec.npz")
            ] + [f"data/extract/{wc.model}/layer{layer}.npz"]
