"""Provenance records, atomic writes, and the source hash that keeps results from going stale."""
import hashlib
import json
from pathlib import Path

import pytest

from attncert.provenance.code_hash import closure, code_hash
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar
from conftest import REPO

SCRIPTS = REPO / "workflow" / "scripts"


def test_provenance_records_the_job_parameters(tmp_path):
    params = {"model": {"name": "m", "source": "embedded", "family": "bert"}, "radii": [0.1], "code": "abc"}
    rec = provenance(params, stage="certify", seeds={"spec_seed": 0}, layer=2)
    assert rec["params"] == params and rec["code_hash"] == "abc" and rec["model_id"] == "m"
    assert rec["layer"] == 2 and rec["package_versions"]["python"]
    assert rec["package_versions"]["python-flint"]  # the audit's arithmetic: a result depends on its version
    assert rec["params_hash"] != provenance({**params, "radii": [0.2]}, stage="certify")["params_hash"]
    out = tmp_path / "x.csv"
    out.write_text("a\n")
    side = write_sidecar(out, rec)
    assert side == Path(str(out) + ".json") and json.loads(side.read_text())["stage"] == "certify"
    assert json.loads(side.read_text())["sha256"] == hashlib.sha256(b"a\n").hexdigest()
    assert json.loads(side.read_text())["size_bytes"] == 2


def test_atomic_path_leaves_nothing_behind_on_failure(tmp_path):
    target = tmp_path / "out.csv"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with atomic_path(target) as tmp:
        tmp.write_text("whole")
    assert target.read_text() == "whole" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def _rel(paths):
    return {str(p.relative_to(REPO / "src")) for p in paths}


def test_code_closure_follows_imports_within_a_stage_only():
    cert = _rel(closure(SCRIPTS / "certify_layer.py"))
    assert "attncert/certify/exact_worst_case.py" in cert  # reached through certify.run
    assert "attncert/head/rounding.py" in cert and "attncert/certify/second_order/dual_bound/weak_duality.py" in cert
    assert not any(p.startswith("attncert/minip/") for p in cert)
    minip = _rel(closure(SCRIPTS / "minip_train.py"))
    assert not any(p.startswith(("attncert/certify/", "attncert/baselines/", "attncert/block/")) for p in minip)
    assert code_hash(SCRIPTS / "certify_layer.py") != code_hash(SCRIPTS / "minip_train.py")
    assert len(code_hash(SCRIPTS / "certify_layer.py")) == 16
