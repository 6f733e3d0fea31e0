"""Snakemake entry point: the Min-IP training runs of one group of a setting's models (rules minip_train_*),
every seed of each -> one JSON record (and sidecar) per (model, seed), one run after another. Each run seeds
torch and numpy itself (attncert.minip.training): its record is the one a process of its own would write, and
its sidecar records the params a run depends on (grid, run, seeds, code), not the group's models."""
import logging
import sys

from attncert.minip.sweep import parse_model, parse_setting
from attncert.minip.training import TrainConfig, run_scaling, run_witness
from attncert.minip.witness import witness_family
from attncert.configuration.device import DeviceError, resolve_device
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_json, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
run = sm.params.run  # attncert.minip.sweep.run_params: what these runs depend on
seeds = [int(s) for s in sm.params.seeds]
models = [str(m) for m in sm.params.models]
run_provenance = {k: v for k, v in sm.params.items() if k != "models"}  # not the group's models
setting = sm.wildcards.setting
what, bits, length = parse_setting(setting)
train = TrainConfig(**run["train"])
jobs = [(model, seed) for model in models for seed in seeds]  # the order of the rule's outputs
if len(sm.output.json) != len(jobs) or len(sm.output.sidecar) != len(jobs):
    sys.exit(f"attncert: minip_train: {len(jobs)} runs but {len(sm.output.json)} outputs")
try:
    resolve_device(run["device"])
except DeviceError as e:
    sys.exit(f"attncert: {e}")
family = None
if what == "witness":
    w = run["witness"]
    family = witness_family(w["bits"], w["queries"], w["ladder_step"])
for (model, seed), out_json in zip(jobs, sm.output.json):
    if not out_json.endswith(f"/{model}_s{seed}.json"):
        sys.exit(f"attncert: minip_train: output {out_json} is not the run of model {model} seed {seed}")
    kind, rank = parse_model(model)
    logging.info("setting %s model %s seed %d params %s", setting, model, seed, run)
    if what == "witness":
        record = run_witness(family=family, kind=kind, rank=rank, seed=seed, train=train, device=run["device"])
    else:
        s = run["scaling"]
        record = run_scaling(bits=bits, length=length, kind=kind, rank=rank, seed=seed, train=train,
                             device=run["device"], **s)
    record["setting"] = setting
    logging.info("record %s", record)
    write_json(out_json, record)
    write_sidecar(
        out_json,
        provenance(
            run_provenance,
            stage="minip_train",
            model_id="minip",
            seeds={"run": seed, **({"pool": run["scaling"]["pool_seed"]} if "scaling" in run else {})},
            setting=setting,
            model=model,
            run_params=run,
        ),
    )
