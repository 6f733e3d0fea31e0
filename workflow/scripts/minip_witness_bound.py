"""Snakemake entry point: the witness family and its proven rank bound (attncert.minip.lower_bound)."""
import logging

from attncert.minip.lower_bound import bound_record
from attncert.minip.witness import witness_family
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_json, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
w = sm.params.witness
family = witness_family(w["bits"], w["queries"], w["ladder_step"])
record = bound_record(family)
# the bound for every number of queries of the same code: how the family's bound grows with S
record["bound_by_queries"] = [
    {k: v for k, v in bound_record(witness_family(w["bits"], s, w["ladder_step"])).items()
     if k in ("n_queries", "family_size", "frobenius", "dominant", "bound")}
    for s in range(2, w["bits"])
]
# the same family with every mixed sequence in both key orders: its bound covers position-dependent maps
both = bound_record(witness_family(w["bits"], w["queries"], w["ladder_step"], both_orders=True))
record["both_orders"] = {k: both[k] for k in ("family_size", "bound", "bound_position_dependent")}
logging.info("witness family: %s", {k: v for k, v in record.items() if k != "bound_by_queries"})
write_json(sm.output.json, record)
write_sidecar(sm.output.json, provenance(sm.params, stage="minip_witness_bound", model_id="minip", witness=w))
