"""Snakemake entry point: the long-context parts (one per length group and head, job long_context_certify) joined into
units.csv and units_certificates.npz, the table and certificate file one job certifying every unit would write
(attncert.certify.long_context_parts)."""
import logging
import sys

import pandas as pd

from attncert.certify.long_context_parts import PartError, merge_parts
from attncert.integrity.intermediate_check import expect_model_of, regenerate_command, verify_intermediate
from attncert.provenance.job_log import start_job_log
from attncert.provenance.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
expect_model_of(sm.params)
p = sm.params
tables = [verify_intermediate(t) for t in sm.input.tables]  # missing or altered part: one line naming the command
certificates = [verify_intermediate(c) for c in sm.input.certificates]
try:
    rows = merge_parts(tables, certificates, p.lengths, p.heads, len(p.modes) * len(p.norms) * len(p.radii),
                       sm.output.csv, sm.output.certificates,
                       fix=lambda path: f"regenerate it with: {regenerate_command(path)}")
except PartError as e:
    print(f"attncert: {e}", file=sys.stderr)
    sys.exit(1)
status = pd.read_csv(sm.output.csv)["status"].value_counts().to_dict()
for out in (sm.output.csv, sm.output.certificates):
    write_sidecar(out, provenance(p, stage="long_context_merge", parts=[str(t) for t in tables], units=rows,
                                  status_counts=status))
logging.info("merged %d units from %d parts", rows, len(tables))
