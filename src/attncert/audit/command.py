"""The `attncert` command (console script). Subcommands:

    attncert audit --model M [--layer L ...] [--rows 0-9,17] [--data data] [--out PREFIX]
        check every certified number of the certification table from its stored certificate (docs/audit.md)
"""
from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "audit":
        from attncert.audit.audit_table import main as audit_main

        return audit_main(rest)
    print(f"attncert: unknown command {command!r}; fix: use `attncert audit --model ...` (attncert --help)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
