"""The `attncert` command (console script `attncert.cli:main`): one entry point, one subcommand per stage.

    attncert certify ...   certify one head of a local checkpoint (attncert.checkpoint.command)
    attncert audit ...     check every certified number of a run from its stored certificates
                           (attncert.audit.audit_table)
    attncert --version     the package version

`attncert SUBCOMMAND --help` lists a subcommand's options.

A subcommand runs with one BLAS/OpenMP thread unless the caller's environment names a count, as the pipeline's jobs
do (`workflow/rules/common.smk`): a certificate's last bits depend on the BLAS thread count (the solvers' paths can
carry that further), so `attncert certify` gives the numbers the pipeline gives for the same unit on the same kind
of machine (on 2 cores: the same wall time).
"""
from __future__ import annotations

import os
import sys

SUBCOMMANDS = {
    "certify": "certify one head of a local checkpoint (GPT-2 or BERT family; default: the embedded model)",
    "audit": "check every certified number of a run from its stored certificates, without a solver",
}


def one_blas_thread() -> None:
    """One BLAS/OpenMP thread unless the environment names a count (module docstring); only before numpy loads."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("attncert")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown (not installed)"


def usage() -> str:
    """The text of `attncert --help`."""
    lines = ["usage: attncert {certify,audit} ... | attncert --version", "", "subcommands:"]
    lines += [f"  {name:9s} {what}" for name, what in SUBCOMMANDS.items()]
    lines += ["", "attncert SUBCOMMAND --help lists a subcommand's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Dispatch argv to a subcommand; its exit status (2 with one line for an unknown subcommand)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"attncert {_version()}")
        return 0
    command, rest = argv[0], argv[1:]
    one_blas_thread()
    if command == "certify":
        from attncert.checkpoint.command import main as run
    elif command == "audit":
        from attncert.audit.audit_table import main as run
    else:
        print(f"attncert: unknown subcommand {command!r}; fix: use one of {', '.join(SUBCOMMANDS)} (attncert --help)",
              file=sys.stderr)
        return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
