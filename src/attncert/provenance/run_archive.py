"""Archiving a finished run, and unpacking it in another clone where Snakemake then plans nothing.

    python -m attncert.provenance.run_archive pack [--out FILE] [SNAKEMAKE ARGS]   (make archive ARGS="...")
    python -m attncert.provenance.run_archive unpack ARCHIVE                      (make unarchive ARCHIVE=...)

Why copying `data/`, `figures/`, `benchmarks/` and `.snakemake/` into a fresh clone is not enough: Snakemake reruns a
job whose outputs are older than its script (it takes a newer script for changed code) or than an input it has no
matching checksum for, and a fresh checkout gives every file git tracks the time of the checkout, later than any
copied output. So every job would be planned, although nothing changed.

`pack` asks Snakemake for the outputs of the run's configuration (`snakemake --summary ARGS`, ARGS as given to the
run: `--configfile`, `--config`, targets) and refuses unless every one exists and is up to date: only a finished run
is archived. The archive (`.tar.gz`, named by the run's model and Min-IP grid, the names its paths carry) holds those
outputs, the sidecar, log and benchmark of each, Snakemake's record of each (`.snakemake/metadata`: the params with the
code hash, the input files and their checksums), and a manifest: the commit, ARGS, the modification time of every
archived file, and the size, sha256 and modification time of every file git tracks (the sources, the configuration
files and the committed inputs) as they were in the run's clone.

`unpack` writes those files into a clone (never over a file that is there), gives each its recorded time, and gives
every tracked file of the clone whose content equals the recorded one (size and sha256) the time it had in the run's
clone; nothing else is changed. The clone then looks to Snakemake as the run's did: with the same code and
configuration it plans nothing. A tracked file whose content differs keeps its own, newer time, and the code hash in
the jobs' params differs too: Snakemake plans the jobs that depend on it, as it would in the run's own clone. A run
on a local checkpoint (`model_source=DIR`) is recognized only where DIR is the same path (the path is a param).
Standard library only, so that a fresh clone unpacks before its environment is set up (docs/sharing_a_run.md).
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from attncert.integrity.file_integrity import file_checksum  # standard library only as well

FORMAT = 1
MANIFEST = "attncert-archive.json"
METADATA = ".snakemake/metadata"
#: where a run's generated files live; an archive holds nothing else
GENERATED = ("data/", "figures/", "benchmarks/", METADATA + "/")
#: a Min-IP path's grid folder (`minip.name`), and a transformer stage's model folder (`model.name`)
GRID_FOLDER = re.compile(r"^(?:data/logs/|benchmarks/|figures/tables/|data/|figures/)minip/([^/]+)/")
MODEL_FOLDER = re.compile(r"^(?:(?:data|figures)/[^/]+|benchmarks)/([^/]+)/")


class ArchiveError(Exception):
    """An archive that cannot be made or unpacked: one line, naming the fix."""


def sha256(path: Path) -> str:
    return file_checksum(path)["sha256"]


def record_path(metadata: Path, key: str) -> Path:
    """Where Snakemake keeps its record of the output `key` under `metadata` (its file persistence: the key in
    url-safe base64, cut into pieces of at most the file system's name length, all but the last a folder '@...')."""
    max_len = (os.pathconf(metadata, "PC_NAME_MAX") if os.name == "posix" and metadata.is_dir() else 255) or 255
    b64 = base64.urlsafe_b64encode(key.encode()).decode()
    parts = [b64[i:i + max_len - 1] for i in range(0, len(b64), max_len - 1)]
    return metadata.joinpath(*["@" + p for p in parts[:-1]], parts[-1])


def parse_summary(text: str, args: list[str]) -> list[tuple[str, list[str]]]:
    """[(output, its logs)] of `snakemake --summary` output; ArchiveError unless every output exists and is up to
    date (Snakemake's plan for it: "no update")."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("output_file\t")), None)
    if start is None:
        raise ArchiveError("snakemake --summary printed no table; fix: run `snakemake --summary "
                           f"{shlex.join(args)}` in the clone's folder and fix what it reports")
    rows = [line.split("\t") for line in lines[start + 1:] if line.count("\t") == 5]
    if not rows:
        raise ArchiveError(f"the configuration ({shlex.join(args) or 'the default'}) has no outputs to archive; fix: "
                           "pass the run's Snakemake arguments (ARGS=\"--configfile ...\" or its targets)")
    stale = [(r[0], r[4] if r[4] != "ok" else r[5]) for r in rows if r[4] != "ok" or r[5] != "no update"]
    if stale:
        raise ArchiveError(f"{len(stale)} of the run's {len(rows)} outputs are missing or out of date (e.g. "
                           f"{stale[0][0]}: {stale[0][1]}); fix: finish the run first (snakemake --cores all "
                           f"{shlex.join(args)}), then archive it")
    return [(r[0], [] if r[3] == "-" else r[3].split(",")) for r in rows]


def benchmark_of(log: str) -> str | None:
    """A job's benchmark beside its log: data/logs/X.log -> benchmarks/X.tsv (every rule names them so)."""
    if log.startswith("data/logs/") and log.endswith(".log"):
        return "benchmarks/" + log[len("data/logs/"):-len(".log")] + ".tsv"
    return None


def run_name(paths) -> str:
    """The archive's name from the names the run's paths carry: its model(s) and its Min-IP grid(s)."""
    grids, models = set(), set()
    for p in paths:
        if m := GRID_FOLDER.match(p):
            grids.add(m.group(1))
        elif m := MODEL_FOLDER.match(p):
            models.add(m.group(1))
    parts = (["+".join(sorted(models))] if models else []) + ([f"minip-{'+'.join(sorted(grids))}"] if grids else [])
    return "_".join(parts) or "run"


def _git(root: Path, *args: str) -> str:
    try:
        res = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise ArchiveError(f"git {' '.join(args)} failed in {root} ({e}); fix: archive from a git clone of the "
                           "repository") from None
    return res.stdout


def tracked_sources(root: Path) -> dict[str, dict]:
    """{path: {size, sha256, mtime_ns}} of every file git tracks in `root` (as it is on disk)."""
    out = {}
    for rel in _git(root, "ls-files", "-z").split("\0"):
        path = root / rel
        if rel and path.is_file() and not path.is_symlink():
            st = path.stat()
            out[rel] = {"size": st.st_size, "sha256": sha256(path), "mtime_ns": st.st_mtime_ns}
    return out


def run_files(root: Path, summary: list[tuple[str, list[str]]]) -> tuple[list[str], dict[str, str]]:
    """(the run's generated files: outputs, their sidecars, logs and benchmarks; {output: its Snakemake record})."""
    files, records = [], {}
    for output, logs in summary:
        record = record_path(root / METADATA, output)
        if not record.is_file():
            raise ArchiveError(f"Snakemake has no record of {output} ({record.relative_to(root)} is missing); fix: "
                               "regenerate it in this clone, so that Snakemake records it")
        records[output] = record.relative_to(root).as_posix()
        extra = [output + ".json", *logs, *filter(None, map(benchmark_of, logs))]
        files += [output] + [f for f in extra if (root / f).is_file()]
    files = sorted(set(files))
    outside = [f for f in files if not f.startswith(GENERATED)]
    if outside:
        raise ArchiveError(f"{outside[0]} is not under {', '.join(GENERATED[:3])}: an archive holds generated files "
                           "only; fix: archive a run of this workflow")
    return files, records


def pack(root: Path, args: list[str], out: Path | None = None, snakemake: str | None = None) -> Path:
    """Archive the finished run of `args` in the clone `root`; returns the archive's path."""
    root = Path(root).resolve()
    beside = Path(sys.executable).with_name("snakemake")
    exe = snakemake or (str(beside) if beside.is_file() else "snakemake")
    try:
        res = subprocess.run([exe, "--summary", *args], cwd=root, capture_output=True, text=True)
    except OSError as e:
        raise ArchiveError(f"cannot run {exe} ({e}); fix: make setup, then make archive") from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ArchiveError(f"snakemake --summary {shlex.join(args)} failed: {last}; fix: run it in {root} and fix "
                           "what it reports")
    files, records = run_files(root, parse_summary(res.stdout, args))
    return write_archive(root, files, records, args, out)


def write_archive(root: Path, files: list[str], records: dict[str, str], args: list[str],
                  out: Path | None = None) -> Path:
    """Write the archive of `files` (relative to the clone `root`) and Snakemake's `records` ({output: record file})
    with its manifest; `out` by default archives/NAME.tar.gz (`run_name`). Never over an existing file."""
    name = run_name(files)
    out = Path(out) if out else root / "archives" / f"{name}.tar.gz"
    if out.exists():
        raise ArchiveError(f"{out} exists; fix: move it away, or name another archive (make archive ... "
                           "OUT=path.tar.gz)")
    manifest = {
        "format": FORMAT, "name": name, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "snakemake_args": args,
        "commit": _git(root, "rev-parse", "HEAD").strip(),
        "modified_tracked_files": _git(root, "status", "--porcelain", "--untracked-files=no").splitlines(),
        "files": {f: (root / f).stat().st_mtime_ns for f in files},
        "records": records,
        "sources": tracked_sources(root),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(tmp, "w:gz") as tar:
        blob = json.dumps(manifest, indent=1, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size, info.mtime = len(blob), int(time.time())
        tar.addfile(info, io.BytesIO(blob))
        for f in files + sorted(records.values()):
            tar.add(root / f, arcname=f, recursive=False)
    tmp.replace(out)
    return out


def _read_manifest(tar: tarfile.TarFile, archive: Path) -> dict:
    try:
        manifest = json.load(tar.extractfile(MANIFEST))
    except (KeyError, ValueError, TypeError):
        raise ArchiveError(f"{archive} holds no readable {MANIFEST}; fix: unpack an archive made by "
                           "`make archive`") from None
    if manifest.get("format") != FORMAT:
        raise ArchiveError(f"{archive} has archive format {manifest.get('format')}, this code reads {FORMAT}; fix: "
                           "unpack it with the commit that made it")
    return manifest


def unpack(root: Path, archive: Path) -> dict:
    """Unpack `archive` into the clone `root`: the run's files with their recorded times, Snakemake's records, and
    the recorded times on every tracked file whose content is the run's. Returns counts for the report."""
    root, archive = Path(root).resolve(), Path(archive)
    if not (root / "Snakefile").is_file():
        raise ArchiveError(f"{root} holds no Snakefile; fix: unpack in the clone's top folder")
    try:
        tar = tarfile.open(archive, "r:gz")
    except (OSError, tarfile.TarError) as e:
        raise ArchiveError(f"{archive} cannot be read as a .tar.gz ({e}); fix: pass an archive made by "
                           "`make archive`") from None
    with tar:
        manifest = _read_manifest(tar, archive)
        files, records = manifest["files"], manifest["records"]
        members = {m.name: m for m in tar.getmembers() if m.name != MANIFEST}
        for name, m in members.items():
            parts = Path(name).parts
            if not m.isfile() or Path(name).is_absolute() or ".." in parts or not name.startswith(GENERATED) \
                    or (name not in files and name not in records.values()):
                raise ArchiveError(f"{archive}: member {name} is not one of the run's generated files; fix: unpack "
                                   "only archives made by `make archive`")
        missing = sorted(set(files) - set(members))
        if missing:
            raise ArchiveError(f"{archive} lacks {missing[0]}, which its manifest lists; fix: make the archive again")
        there = [f for f in files if (root / f).exists()]
        if there:
            raise ArchiveError(f"{len(there)} of the archive's files exist in {root} (e.g. {there[0]}); fix: unpack "
                               "into a fresh clone, or remove them first")
        for name in files:
            _write(tar, members[name], root / name, files[name])
        metadata = root / METADATA
        metadata.mkdir(parents=True, exist_ok=True)
        (root / ".snakemake" / "incomplete").mkdir(exist_ok=True)  # else Snakemake takes the folder for an old one
        for key, name in records.items():
            _write(tar, members[name], record_path(metadata, key), None)
    same, differ = [], []
    for rel, rec in manifest["sources"].items():
        path = root / rel
        if path.is_file() and not path.is_symlink() and path.stat().st_size == rec["size"] \
                and sha256(path) == rec["sha256"]:
            os.utime(path, ns=(rec["mtime_ns"], rec["mtime_ns"]))
            same.append(rel)
        elif path.exists():
            differ.append(rel)
    return {"files": len(files), "same": len(same), "differ": differ, "commit": manifest["commit"],
            "args": manifest["snakemake_args"], "name": manifest["name"]}


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path, mtime_ns: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".attncert-part")
    with tar.extractfile(member) as src, open(tmp, "wb") as dst:
        for block in iter(lambda: src.read(1 << 20), b""):
            dst.write(block)
    tmp.replace(path)
    ns = mtime_ns if mtime_ns is not None else int(member.mtime * 1e9)
    os.utime(path, ns=(ns, ns))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attncert.provenance.run_archive",
                                 description="Archive a finished run (pack) or unpack one into a clone (unpack), so "
                                 "that Snakemake there plans nothing while the code and configuration are the run's.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="archive the finished run of the given Snakemake arguments")
    p.add_argument("--out", help="the archive's path (default: archives/MODEL_minip-GRID.tar.gz)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the run's Snakemake arguments (--configfile, --config, "
                   "targets)")
    u = sub.add_parser("unpack", help="unpack an archive into this clone")
    u.add_argument("archive")
    a = ap.parse_args(argv)
    root = Path.cwd()
    try:
        if a.command == "pack":
            args = a.args[1:] if a.args[:1] == ["--"] else a.args
            out = pack(root, args, Path(a.out) if a.out else None)
            shown = out.relative_to(root) if out.is_relative_to(root) else out
            print(f"attncert: archived the run to {shown} ({out.stat().st_size / 1e6:.1f} MB); unpack it in a fresh "
                  f"clone with: make unarchive ARCHIVE={shown}")
        else:
            r = unpack(root, Path(a.archive))
            head = _git(root, "rev-parse", "HEAD").strip() if (root / ".git").exists() else "?"
            print(f"attncert: unpacked {r['files']} files of the run {r['name']} (commit {r['commit'][:12]}; this "
                  f"clone: {head[:12]}); {r['same']} tracked files are as in the run's clone and got its times",
                  file=sys.stderr)
            if r["differ"]:
                print(f"attncert: {len(r['differ'])} tracked files differ from the run's (e.g. {r['differ'][0]}): "
                      "Snakemake reruns the jobs that depend on them", file=sys.stderr)
            print(f"attncert: check with: snakemake -n {shlex.join(r['args'])}".rstrip(), file=sys.stderr)
    except ArchiveError as e:
        print(f"attncert: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
