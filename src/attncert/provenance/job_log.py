"""Per-job logging for the Snakemake entry points.

`start_job_log(log_path)` sends `logging` records to the job's log file and tees stderr (progress
bars, warnings, tracebacks) to that file as well, so a failing job's log says why it failed. A job that
stops on an unusable input file (`IntermediateError`, raised by the loaders) or a model it cannot load
(`ModelSourceError`) prints its one-line message
as `attncert: ...` and exits with status 1, without a traceback, like the entry scripts' `sys.exit` on
other bad input.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from attncert.integrity.intermediate_check import IntermediateError
from attncert.model.model_source import ModelSourceError


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


def _one_line_for_bad_inputs(exc_type, exc, tb):
    if issubclass(exc_type, (IntermediateError, ModelSourceError)):  # stderr is teed to the log
        print(f"attncert: {exc}", file=sys.stderr)
    else:
        sys.__excepthook__(exc_type, exc, tb)


def start_job_log(log_path: str | Path) -> logging.Logger:
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "a", buffering=1)
    sys.stderr = _Tee(sys.__stderr__, fh)
    logging.basicConfig(stream=fh, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
    sys.excepthook = _one_line_for_bad_inputs
    return logging.getLogger("attncert")
