"""The one interface of every benchmark script, and its generated result.

Every script is run from the repository root as a module, `python -m bench.NAME [options]`, and takes

    --quick            a small run (at most about a minute on one core): the script's own QUICK sizes
    --results DIR      where the result goes (default bench/results)

Its report is printed and also written, with its provenance, to `DIR/NAME[-PART][-quick].md` (the
printed report under a header) and `.json` ({"provenance", "result", "report"}; `result` is the
structured data the script returns, `report` the printed lines). Provenance: the command line and
arguments, UTC start time and wall seconds, the git commit of the working tree (and whether it had
uncommitted changes), Python and package versions, CPU count and load average.

Usage in a script:

    from bench import common
    def main(args) -> dict: ...                      # prints its report, returns structured results
    if __name__ == "__main__":
        common.run("bench_x", main, common.parse(build_parser(), QUICK))
"""
from __future__ import annotations

import argparse
import datetime as _dt
import io
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PACKAGES = ("numpy", "scipy", "cvxpy", "clarabel", "scs", "torch", "bound-propagation", "python-flint", "transformers")


def process_status_mb(field: str) -> float:
    """A memory field of this process from /proc/self/status in MB (VmRSS: resident now, VmHWM: its peak); NaN
    where the kernel does not report it."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def reset_peak_memory() -> bool:
    """Reset this process's VmHWM to its current resident size (Linux >= 4.0), freed heap pages returned first so
    that reuse shows in the next peak; False where the kernel does not allow it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def single_threaded_blas() -> None:
    """2 shared cores: one BLAS/OpenMP thread per process (set before numpy is imported), the `attncert` command's
    default (`attncert.cli.one_blas_thread`, which loads no numpy)."""
    from attncert.cli import one_blas_thread

    one_blas_thread()


def parse(ap: argparse.ArgumentParser, quick: dict, argv=None) -> argparse.Namespace:
    """Add the shared options to `ap` and parse; --quick replaces the script's sizes by `quick`."""
    shown = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in quick.items()) or "the full run is already that small"
    ap.add_argument("--quick", action="store_true", help=f"a small run, at most about a minute ({shown})")
    ap.add_argument(
        "--results", type=Path, default=RESULTS, help="directory of the generated result (default bench/results)"
    )
    args = ap.parse_args(argv)
    if args.quick:
        for key, value in quick.items():
            if not hasattr(args, key):
                raise AttributeError(f"QUICK names --{key}, which the script does not take")
            setattr(args, key, value)
    return args


def _git(*cmd) -> str:
    try:
        return subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _command() -> str:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    head = ["python", "-m", spec.name] if spec is not None else ["python", sys.argv[0]]
    return " ".join(head + sys.argv[1:])


def provenance(args: argparse.Namespace, started: float, seconds: float) -> dict:
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return {
        "command": _command(),
        "arguments": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "started_utc": _dt.datetime.fromtimestamp(started, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "wall_seconds": round(seconds, 1),
        "git_commit": _git("rev-parse", "HEAD"),
        "uncommitted_changes": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "python": platform.python_version(),
        "packages": versions,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


class _Tee(io.TextIOBase):
    def __init__(self, stream):
        self.stream, self.buffer_ = stream, io.StringIO()

    def write(self, s):
        self.stream.write(s)
        self.buffer_.write(s)
        return len(s)

    def flush(self):
        self.stream.flush()


def result_name(name: str, args: argparse.Namespace, part: str | None = None) -> str:
    return "-".join([name] + ([part] if part else []) + (["quick"] if args.quick else []))


def run(name: str, main, args: argparse.Namespace, part: str | None = None) -> dict:
    """Run main(args), printing as usual, then write the result files (see the module docstring)."""
    started = time.time()
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    try:
        result = main(args)
    finally:
        sys.stdout = tee.stream
    seconds = time.time() - started
    prov = provenance(args, started, seconds)
    report = tee.buffer_.getvalue()
    stem = result_name(name, args, part)
    args.results.mkdir(parents=True, exist_ok=True)
    record = _repository_relative({"provenance": prov, "result": result if result is not None else {},
                                   "report": report.splitlines()})
    (args.results / f"{stem}.json").write_text(json.dumps(record, indent=1, default=_jsonable) + "\n")
    prov, report = record["provenance"], "\n".join(record["report"])
    header = [
        f"# {stem}",
        "",
        "<!-- generated by the script below; do not edit -->",
        "",
        f"- command: `{prov['command']}`" + (" (quick: small sizes, at most about a minute)" if args.quick else ""),
        f"- run: {prov['started_utc']} UTC, {prov['wall_seconds']} s wall, {prov['cpus']} CPUs, "
        f"load average {', '.join(map(str, prov['load_average']))}",
        f"- code: commit `{prov['git_commit'][:12]}`"
        + (" with uncommitted changes" if prov["uncommitted_changes"] else ""),
        f"- python {prov['python']}; " + ", ".join(f"{k} {v}" for k, v in prov["packages"].items()),
        f"- structured data: `{stem}.json`",
        "",
        "```",
        report.rstrip("\n"),
        "```",
        "",
    ]
    (args.results / f"{stem}.md").write_text("\n".join(header))
    print(f"[bench] wrote {args.results / stem}.md and .json", file=sys.stderr)
    return record


def _repository_relative(o):
    """Every path inside the repository written relative to it, so that no result names this machine's paths."""
    if isinstance(o, Path):
        o = str(o)
    if isinstance(o, str):
        return o.replace(str(REPO) + os.sep, "").replace(str(REPO), ".")
    if isinstance(o, dict):
        return {k: _repository_relative(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_repository_relative(v) for v in o]
    return o


def _jsonable(o):
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:
        pass
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)
