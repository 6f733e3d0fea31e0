"""Snakemake entry point: one Min-IP training run (setting, model, seed) -> a JSON record."""
import logging
import sys

from attncert.minip.sweep import parse_model, parse_setting
from attncert.minip.training import TrainConfig, run_scaling, run_witness
from attncert.minip.witness import witness_family
from attncert.pipeline.device import DeviceError, resolve_device
from attncert.pipeline.job_log import start_job_log
from attncert.pipeline.provenance import provenance, write_json, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
run = sm.params.run  # attncert.minip.sweep.run_params: what this run depends on
setting, model, seed = sm.wildcards.setting, sm.wildcards.model, int(sm.wildcards.seed)
kind, rank = parse_model(model)
what, bits, length = parse_setting(setting)
train = TrainConfig(**run["train"])
try:
    resolve_device(run["device"])
except DeviceError as e:
    sys.exit(f"attncert: {e}")
logging.info("setting %s model %s seed %d params %s", setting, model, seed, run)
if what == "witness":
    w = run["witness"]
    record = run_witness(family=witness_family(w["bits"], w["queries"], w["ladder_step"]),
                         kind=kind, rank=rank, seed=seed, train=train, device=run["device"])
else:
    s = run["scaling"]
    record = run_scaling(bits=bits, length=length, kind=kind, rank=rank, seed=seed, train=train, device=run["device"], **s)
record["setting"] = setting
logging.info("record %s", record)
write_json(sm.output.json, record)
write_sidecar(sm.output.json, provenance(sm.params, stage="minip_train", model_id="minip",
                                         seeds={"run": seed, **({"pool": run["scaling"]["pool_seed"]} if "scaling" in run else {})},
                                         setting=setting, model=model, run_params=run))
