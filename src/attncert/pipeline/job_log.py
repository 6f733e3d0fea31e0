"""Per-job logging for the Snakemake entry points.

`start_job_log(log_path)` sends `logging` records to the job's log file and tees stderr (progress
bars, warnings, tracebacks) to that file as well, so a failing job's log says why it failed.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path


class _Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, data):
        for s in self.streams:
            s.write(data)
            s.flush()
        return len(data)

    def flush(self):
        for s in self.streams:
            s.flush()

    def isatty(self):
        return False


def start_job_log(log_path: str | Path) -> logging.Logger:
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "a", buffering=1)
    sys.stderr = _Tee(sys.__stderr__, fh)
    logging.basicConfig(stream=fh, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
    return logging.getLogger("attncert")
