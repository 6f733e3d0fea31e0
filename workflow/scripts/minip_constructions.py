"""Snakemake entry point: exhaustive checks of the exact constructions (attncert.minip.constructions)."""
import logging

import pandas as pd

from attncert.minip.constructions import construction_checks
from attncert.minip.witness import witness_family
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
c, w = sm.params.constructions, sm.params.witness
rows = construction_checks(c["max_bits"], c["beta"], witness_family(w["bits"], w["queries"], w["ladder_step"]))
df = pd.DataFrame(rows)
logging.info("constructions:\n%s", df.to_string())
with atomic_path(sm.output.csv) as tmp:
    df.to_csv(tmp, index=False)
write_sidecar(sm.output.csv, provenance(sm.params, stage="minip_constructions", model_id="minip", constructions=c))
