"""The audit's certificate part as one job per piece (each certification layer, the long-context table, the block
table): the joined records are the file one job auditing every piece writes, row for row, and `attncert audit`
gives the same verdicts; a missing or altered piece stops the join with one line naming the command that
regenerates it. The workflow's entry scripts run in-process with a stand-in for Snakemake's object."""
import json
import shutil

import pytest

from attncert.audit.audit_table import (audit_certificate_part, audit_model, certificate_parts, join_records, main,
                                        read_records, recorded_coverage, write_records)
from attncert.integrity.intermediate_check import IntermediateError
from summary_run import run_script
from test_audit import MODEL, RUN_CONFIG, write_layer, write_run_config
from test_long_context_audit import LC, lc_root  # noqa: F401 - the long-context fixture

CONFIG = RUN_CONFIG | {"long_context": LC}
LAYERS = [0, 1]


@pytest.fixture(scope="module")
def run(tmp_path_factory, lc_root):  # noqa: F811
    """A run folder: two certified layers, the long-context table, the recorded configuration, every piece's
    records written by the audit_certificates script, and their join by audit_certificates_merge."""
    root = tmp_path_factory.mktemp("audit_parts")
    data = root / "data"
    shutil.copytree(lc_root, data)
    for layer, seed in zip(LAYERS, (0, 1)):
        write_layer(data, layer, seed=seed)
    write_run_config(data, CONFIG, {"layers": LAYERS, "heads": [0, 1], "block_transitions": []})
    return root


def _pieces(root, monkeypatch):
    monkeypatch.chdir(root)  # the scripts read data/ of the working directory, as in the pipeline
    parts = certificate_parts(LAYERS)
    for part in parts:
        run_script("audit_certificates.py", {}, {"records": f"data/audit/{MODEL}/parts/{part}.csv"},
                   {"part": part}, root / "log.txt")
    return parts


def _join(parts):
    run_script("audit_certificates_merge.py", {"records": [f"data/audit/{MODEL}/parts/{p}.csv" for p in parts]},
               {"records": f"data/audit/{MODEL}/certificate_records.csv"}, {"parts": parts}, "log.txt")


def test_joined_pieces_are_the_one_job_records(run, monkeypatch):
    parts = _pieces(run, monkeypatch)
    _join(parts)
    data = run / "data"
    joined = data / "audit" / MODEL / "certificate_records.csv"
    coverage = recorded_coverage(data, MODEL)
    one_job = run / "one_job.csv"
    write_records(audit_model(data, MODEL, coverage.layers, coverage=coverage, parts=("certificates",)), one_job)
    assert joined.read_bytes() == one_job.read_bytes()
    records = read_records(joined)
    assert {r["table"] for r in records} == {"certify", "long_context"} and all(r["status"] != "fail" for r in records)
    side = json.loads((data / "audit" / MODEL / "certificate_records.csv.json").read_text())
    assert set(side["stage_seconds"]) == {"certification tables", "long-context table", "block table"}
    # the command line audits the same pieces in the same order: the same verdict on every number
    assert main(["--model", MODEL, "--data", str(data), "--part", "certificates", "--out", str(run / "cli")]) == 0
    cli = read_records(run / "cli.csv")
    key = ("table", "layer", "row", "number", "status", "check")
    assert [tuple(r[k] for k in key) for r in cli] == [tuple(r[k] for k in key) for r in records]


@pytest.mark.parametrize("damage", ["missing", "altered"])
def test_a_missing_or_altered_piece_stops_the_join_with_one_line(run, monkeypatch, tmp_path, damage):
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("certificate_records.csv*"))
    parts = _pieces(copy, monkeypatch)
    piece = copy / "data" / "audit" / MODEL / "parts" / "layer1.csv"
    if damage == "missing":
        piece.unlink()
    else:
        piece.write_text(piece.read_text().replace("pass", "fail", 1))
    with pytest.raises(IntermediateError) as e:
        _join(parts)
    msg = str(e.value)
    assert "\n" not in msg and msg.endswith(f"regenerate it with: snakemake --cores all data/audit/{MODEL}/parts/"
                                            "layer1.csv --forcerun audit_certificates")
    assert not (copy / "data" / "audit" / MODEL / "certificate_records.csv").exists()


def test_an_unknown_piece_is_refused(run):
    with pytest.raises(Exception, match="no certificate part 'layers'; fix: name one of layer<L>, long_context"):
        audit_certificate_part(run / "data", MODEL, "layers")


def test_a_file_that_is_no_records_file_is_refused(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(Exception, match="is not an audit records file .* fix: rerun"):
        join_records([bad], tmp_path / "out.csv", fix=lambda path: "rerun")
