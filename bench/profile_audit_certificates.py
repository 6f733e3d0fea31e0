"""cProfile of the `audit_certificates` job's work (workflow/scripts/audit_certificates.py) on a finished run.

    python -m bench.profile_audit_certificates --data DATA [--model M] --out PREFIX [--part block]

Calls `audit_model(DATA, model, layers, coverage=..., parts=("certificates",))` exactly as the job does (reads
only) and writes PREFIX.txt: the command, the seconds of each part, and the top 30 functions by cumulative and by
total time; with --records also PREFIX.csv, the records (to compare verdicts and margins before and after).
--part restricts the profile to one part's function (certify layers, long_context or block) on the same inputs;
--rows N audits only the first N rows of each certify layer (certify part); --transition L with --part block profiles
the pipeline's piece `block{L}` alone (that transition's rows; the table's own checks are the piece `block`). The
summary is also written to `profile_audit_certificates[-PART][-quick].md` / `.json` (bench/common.py; --quick: the
first rows of layer 0).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

from bench import common

REPO = common.REPO
QUICK = {"part": "certify", "layers": "0", "rows": 200}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(REPO / "data"))
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--out", required=True)
    ap.add_argument("--records", action="store_true", help="also write PREFIX.csv, the audit records")
    ap.add_argument("--part", choices=("all", "certify", "long_context", "block"), default="all")
    ap.add_argument("--layers", default=None, help="certify part: comma-separated layers (default: the run's)")
    ap.add_argument("--rows", type=int, default=None, help="certify part: only the first ROWS rows of each layer")
    ap.add_argument("--transition", type=int, default=None, help="block part: only the piece of this transition")
    ap.add_argument("--no-profile", action="store_true", help="time only (no cProfile overhead)")
    return ap


def main(a) -> dict:
    from attncert.audit.audit_table import audit_layer, audit_model, recorded_coverage, write_records
    from attncert.audit.block_audit import audit_block
    from attncert.audit.long_context_audit import audit_long_context
    from attncert.audit.audit_table import MALFORMED, _damaged
    from attncert.audit.table_coverage import block_records

    root = Path(a.data)
    coverage = recorded_coverage(root, a.model)
    layers = [int(x) for x in a.layers.split(",")] if a.layers else coverage.layers
    rows = None if a.rows is None else set(range(a.rows))
    stage_seconds: dict = {}

    def work():
        if a.part == "all":
            return audit_model(root, a.model, layers, coverage=coverage, stage_seconds=stage_seconds,
                               parts=("certificates",))
        if a.part == "certify":
            return [rec for L in layers for rec in audit_layer(root, a.model, L, rows, coverage)]
        if a.part == "long_context":
            return audit_long_context(root, a.model, coverage.long_context, MALFORMED, _damaged)
        if a.transition is not None:
            return audit_block(root, a.model, coverage.block, a.transition)
        return block_records(root, a.model) + audit_block(root, a.model, coverage.block)

    prof = None if a.no_profile else cProfile.Profile()
    t0, c0 = time.perf_counter(), time.process_time()
    records = work() if prof is None else prof.runcall(work)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = io.StringIO()
    out.write(f"command: {' '.join(['python -m bench.profile_audit_certificates', *sys.argv[1:]])}\n")
    out.write(f"wall seconds {wall:.1f}, cpu seconds {cpu:.1f}{'' if prof is None else ' under cProfile'} (2 shared "
              "cores: noisy; compare shares)\n")
    out.write("seconds per part: " + ", ".join(f"{k} {v:.1f}" for k, v in stage_seconds.items()) + "\n")
    out.write(f"records {len(records)}\n\n")
    for key in ("cumulative", "tottime") if prof is not None else ():
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(30)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out + ".txt").write_text(out.getvalue())
    print(out.getvalue()[:400])
    if a.records:
        write_records(records, Path(a.out + ".csv"))
    return {"part": a.part, "layers": layers, "rows": a.rows, "records": len(records), "wall_seconds": wall,
            "cpu_seconds": cpu, "seconds_per_part": stage_seconds, "profile": a.out + ".txt"}


if __name__ == "__main__":
    args = common.parse(build_parser(), QUICK)
    common.run("profile_audit_certificates", main, args, part=None if args.part == "all" else args.part)
