"""Archiving a finished run and unpacking it in another clone (attncert.provenance.run_archive).

The end-to-end test runs the real workflow in a clone, archives it with `make archive`, unpacks it with
`make unarchive` in a fresh clone of the same commit and checks that Snakemake plans nothing there, that a plain copy
of the same files would have planned every job, and that an edit of the stage's code plans its rerun."""
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from attncert.provenance import run_archive
from attncert.provenance.run_archive import ArchiveError, parse_summary, record_path, unpack, write_archive
from conftest import REPO, SNAKEMAKE

HEADER = "output_file\tdate\trule\tlog-file(s)\tstatus\tplan"


def test_the_summary_of_a_finished_run_lists_outputs_and_logs():
    text = "Building DAG of jobs...\n" + "\n".join([
        HEADER,
        "data/minip/g/witness_bound.json\tThu Dec  3 2026\tminip_witness_bound\tdata/logs/minip/g/witness_bound.log\tok"
        "\tno update",
        "data/minip/g/witness_bound.json.json\tThu Dec  3 2026\tminip_witness_bound\t-\tok\tno update"])
    assert parse_summary(text, []) == [("data/minip/g/witness_bound.json", ["data/logs/minip/g/witness_bound.log"]),
                                       ("data/minip/g/witness_bound.json.json", [])]


@pytest.mark.parametrize("status, plan", [("missing", "update pending"), ("ok", "update pending"),
                                          ("params changed", "update pending")])
def test_an_unfinished_run_is_not_archived(status, plan):
    text = "\n".join([HEADER, f"data/minip/g/sweep.csv\t-\tminip_collect\t-\t{status}\t{plan}",
                      "data/minip/g/witness_bound.json\tThu Dec  3 2026\tminip_witness_bound\t-\tok\tno update"])
    with pytest.raises(ArchiveError) as e:
        parse_summary(text, ["--configfile", "workflow/config/paper.yaml"])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("1 of the run's 2 outputs are missing or out of date")
    assert "fix: finish the run first (snakemake --cores all --configfile workflow/config/paper.yaml)" in msg


def test_no_table_or_no_outputs_say_what_to_do():
    with pytest.raises(ArchiveError, match="printed no table; fix: run `snakemake --summary"):
        parse_summary("MissingRuleException: ...", [])
    with pytest.raises(ArchiveError, match="has no outputs to archive; fix: pass the run's Snakemake arguments"):
        parse_summary(HEADER, [])


@pytest.mark.parametrize("key", ["data/minip/default/witness_bound.json", "data/x/" + "y" * 400 + ".csv"])
def test_records_are_where_snakemake_keeps_them(tmp_path, key):
    """Snakemake's own file persistence (a private method, so a change of its layout fails here first)."""
    from snakemake.persistence.file import FilePersistence

    stub = SimpleNamespace(_fetch_max_len=lambda subject: os.pathconf(subject, "PC_NAME_MAX"))
    assert record_path(tmp_path, key) == Path(FilePersistence._record_path(stub, str(tmp_path), key))


def test_benchmarks_and_names():
    assert run_archive.benchmark_of("data/logs/m/certify/layer0.log") == "benchmarks/m/certify/layer0.tsv"
    assert run_archive.benchmark_of("elsewhere.log") is None
    assert run_archive.run_name(["data/certify/m/layer0.csv", "data/logs/minip/p/collect.log",
                                 "figures/tables/m/audit.md", "benchmarks/minip/p/collect.tsv"]) == "m_minip-p"
    assert run_archive.run_name(["figures/minip/p/a.pdf"]) == "minip-p"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


def _fake_clone(root: Path) -> Path:
    """A git repository with two tracked sources and one generated output (with sidecar, log and record)."""
    (root / "workflow").mkdir(parents=True)
    (root / "Snakefile").write_text("# rules\n")
    (root / "workflow" / "step.py").write_text("print('step')\n")
    _git(root, "init", "-q")
    _git(root, "add", "Snakefile", "workflow/step.py")
    _git(root, "commit", "-qm", "sources")
    for rel, text in (("data/minip/g/out.csv", "a\n1\n"), ("data/minip/g/out.csv.json", "{}"),
                      ("data/logs/minip/g/step.log", "log\n")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    record = record_path(root / ".snakemake" / "metadata", "data/minip/g/out.csv")
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"rule": "step"}))
    for i, rel in enumerate(("Snakefile", "workflow/step.py", "data/minip/g/out.csv", "data/minip/g/out.csv.json",
                             "data/logs/minip/g/step.log")):  # sources older than the outputs, as after a run
        os.utime(root / rel, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    return root


def _archive(src: Path) -> Path:
    files = ["data/logs/minip/g/step.log", "data/minip/g/out.csv", "data/minip/g/out.csv.json"]
    record = record_path(src / ".snakemake" / "metadata", "data/minip/g/out.csv").relative_to(src).as_posix()
    return write_archive(src, files, {"data/minip/g/out.csv": record}, ["data/minip/g/out.csv"])


def test_unpacking_restores_the_runs_times_only_where_the_content_is_the_runs(tmp_path):
    src = _fake_clone(tmp_path / "a")
    archive = _archive(src)
    assert archive == src / "archives" / "minip-g.tar.gz"
    dst = tmp_path / "b"
    _git(tmp_path, "clone", "-q", str(src), str(dst))
    (dst / "workflow" / "step.py").write_text("print('another step')\n")  # another commit's code
    counts = unpack(dst, archive)
    assert counts["files"] == 3 and counts["differ"] == ["workflow/step.py"] and counts["same"] == 1
    for rel in ("Snakefile", "data/minip/g/out.csv", "data/minip/g/out.csv.json", "data/logs/minip/g/step.log"):
        assert (dst / rel).stat().st_mtime_ns == (src / rel).stat().st_mtime_ns, rel
        assert (dst / rel).read_bytes() == (src / rel).read_bytes()
    assert (dst / "workflow" / "step.py").stat().st_mtime_ns > (dst / "data/minip/g/out.csv").stat().st_mtime_ns
    assert record_path(dst / ".snakemake" / "metadata", "data/minip/g/out.csv").read_text() == '{"rule": "step"}'
    with pytest.raises(ArchiveError, match=r"^3 of the archive's files exist in .*fix: unpack into a fresh clone"):
        unpack(dst, archive)


def test_an_archive_is_never_overwritten_and_holds_only_generated_files(tmp_path):
    src = _fake_clone(tmp_path / "a")
    archive = _archive(src)
    with pytest.raises(ArchiveError, match="exists; fix: move it away"):
        _archive(src)
    forged = tmp_path / "forged.tar.gz"
    with tarfile.open(archive) as tar, tarfile.open(forged, "w:gz") as out:
        manifest = json.load(tar.extractfile(run_archive.MANIFEST))
        manifest["files"]["Snakefile"] = 0
        blob = json.dumps(manifest).encode()
        info = tarfile.TarInfo(run_archive.MANIFEST)
        info.size = len(blob)
        out.addfile(info, io.BytesIO(blob))
        out.add(src / "Snakefile", arcname="Snakefile")
    dst = tmp_path / "b"
    _git(tmp_path, "clone", "-q", str(src), str(dst))
    with pytest.raises(ArchiveError, match="member Snakefile is not one of the run's generated files"):
        unpack(dst, forged)
    assert not (dst / "data").exists()


def _snapshot(dst: Path) -> Path:
    """A git repository holding this checkout's tracked and untracked (not ignored) files, as they are now."""
    dst.mkdir()
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for rel in filter(None, listed):
        if (REPO / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)
    _git(dst, "init", "-q")
    _git(dst, "add", "-A")
    _git(dst, "commit", "-qm", "snapshot")
    return dst


def _run(cwd: Path, *cmd: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(cwd / "src"))
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=900, env=env)


def _planned(cwd: Path, targets: list[str]) -> tuple[int, str]:
    """(jobs a dry run of `targets` plans in `cwd`, its output)."""
    res = _run(cwd, SNAKEMAKE, "-n", "--cores", "1", *targets)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    if "Nothing to be done" in out:
        return 0, out
    return int(next(line.split()[1] for line in out.splitlines() if line.startswith("total "))), out


@pytest.mark.slow
def test_an_archived_run_is_up_to_date_in_a_fresh_clone_until_its_code_changes(tmp_path):
    targets = ["data/minip/default/witness_bound.json", "data/run/all-MiniLM-L6-v2/config.yaml"]
    origin = _snapshot(tmp_path / "origin")
    run, fresh, copied = (tmp_path / n for n in ("run", "fresh", "copied"))
    _git(tmp_path, "clone", "-q", str(origin), str(run))
    res = _run(run, SNAKEMAKE, "--cores", "1", *targets)
    assert res.returncode == 0, res.stderr[-3000:]
    res = _run(run, "make", "archive", f"BIN={Path(sys.executable).parent}", f"ARGS={' '.join(targets)}")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    archive = run / "archives" / "all-MiniLM-L6-v2_minip-default.tar.gz"
    assert archive.is_file(), res.stdout
    for clone in (fresh, copied):  # cloned after the run, as anyone receiving the archive would
        _git(tmp_path, "clone", "-q", str(origin), str(clone))

    # a plain copy of the same files: the checkout's sources are newer than every output, so all is planned
    with tarfile.open(archive) as tar:
        tar.extractall(copied, members=[m for m in tar.getmembers() if m.name != run_archive.MANIFEST],
                       **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    jobs, out = _planned(copied, targets)
    assert jobs == 2 and "Code has changed since last execution" in out, out[-3000:]

    res = _run(fresh, "make", "unarchive", f"ARCHIVE={archive}", f"PYTHON={sys.executable}")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert "got its times" in res.stderr and "differ" not in res.stderr, res.stderr
    jobs, out = _planned(fresh, targets)
    assert jobs == 0, out[-3000:]

    # an edit of the stage's code (a comment is enough: the code hash changes): its job, and only it, is planned
    module = fresh / "src" / "attncert" / "minip" / "lower_bound.py"
    module.write_text(module.read_text() + "\n# edited after the run\n")
    jobs, out = _planned(fresh, targets)
    assert jobs == 1 and "rule minip_witness_bound:" in out and "run_configuration" not in out, out[-3000:]
