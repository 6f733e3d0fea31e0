"""The audit confirms every certified number of a tiny certified layer, and each tampering makes it fail on the
right row and check."""
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from attncert.audit.audit_table import audit_layer, main
from attncert.certify.certificate_store import CertificateFile, write_certificates
from attncert.certify.layer_run import certify_layer_units
from attncert.head.units import grid, specification_vectors, write_specification
from attncert.pipeline.intermediate_check import IntermediateError
from attncert.pipeline.provenance import atomic_path, provenance, write_sidecar
from intermediate_files import tiny_layer_arrays

MODEL = "m"
QP = 3


def write_layer(root, layer: int, seed: int = 0):
    arrays = tiny_layer_arrays()
    if seed:
        rng = np.random.default_rng(seed)
        arrays = {k: (v + 0.3 * rng.standard_normal(v.shape) if v.dtype == np.float64 else v) for k, v in arrays.items()}
    ext = root / "extract" / MODEL / f"layer{layer}.npz"
    with atomic_path(ext) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    write_sidecar(ext, provenance({"code": "t"}, stage="extract", model_id=MODEL, layer=layer))
    base = root / "certify" / MODEL
    spec = specification_vectors(arrays, layer, [QP], 0)
    write_specification(base / f"layer{layer}_spec.npz", spec, [QP], layer, 0)
    units = grid([0, 1], [0], [QP], [0.01, 0.2], ["linf", "l2"], ["fixed", "varying"], layer)
    df, entries, pool = certify_layer_units(arrays, spec, [QP], units, layer, ascent_check_fraction=0.0)
    write_certificates(base / f"layer{layer}_certificates.npz", entries, pool)
    write_sidecar(base / f"layer{layer}_certificates.npz", provenance({"code": "t"}, stage="certify"))
    with atomic_path(base / f"layer{layer}.csv") as tmp:
        df.to_csv(tmp, index=False, float_format="%.17g")
    write_sidecar(base / f"layer{layer}.csv", provenance({"code": "t"}, stage="certify"))
    return df


@pytest.fixture(scope="session")
def certified_root(tmp_path_factory):
    """data/ of two tiny certified layers (layer 1 has other weights), built once."""
    root = tmp_path_factory.mktemp("audit") / "data"
    write_layer(root, 0)
    write_layer(root, 1, seed=1)
    return root


@pytest.fixture
def data_root(certified_root, tmp_path):
    """A fresh copy of the certified data/ that a test may tamper with."""
    dst = tmp_path / "data"
    shutil.copytree(certified_root, dst)
    return dst


def outcomes(root, layer=0):
    return pd.DataFrame(audit_layer(root, MODEL, layer))


def failures(df):
    return df[df.status == "fail"]


def test_every_certified_number_passes(certified_root):
    for layer in (0, 1):
        df = outcomes(certified_root, layer)
        assert len(df) == 16 * 5
        assert failures(df).empty, failures(df)[["row", "number", "check", "margin", "reason"]].to_string()
        fixed = df[df["mode"] == "fixed"]
        assert (fixed.status == "pass").all()
        varying_exact = df[(df["mode"] == "varying") & df.number.isin(["exact_lo", "exact_hi"])]
        assert (varying_exact.status == "not applicable").all()


def _edit_table(root, row, column, fn, layer=0):
    path = root / "certify" / MODEL / f"layer{layer}.csv"
    df = pd.read_csv(path)
    df.loc[row, column] = fn(df.loc[row, column])
    df.to_csv(path, index=False, float_format="%.17g")
    write_sidecar(path, provenance({"code": "t"}, stage="certify"))  # a consistent tamperer: checksums match


def _edit_certificates(root, fn, layer=0):
    path = root / "certify" / MODEL / f"layer{layer}_certificates.npz"
    with CertificateFile(path) as f:
        entries = {k: np.array(f.array(k)) for k in f.keys}
    fn(entries)
    write_certificates(path, entries)
    write_sidecar(path, provenance({"code": "t"}, stage="certify"))


def _only_failure(df, row, number, check):
    bad = failures(df)
    assert len(bad) >= 1
    hit = bad[(bad.row == row) & (bad.number == number)]
    assert len(hit) == 1 and hit.iloc[0]["check"] == check, bad[["row", "number", "check", "reason"]].to_string()
    assert set(bad.row) == {row}


@pytest.mark.parametrize("number, check", [("second_order", "weak_duality"), ("second_order_tight", "weak_duality"),
                                           ("first_order", "greedy_lp")])
def test_lowered_bound_fails(data_root, number, check):
    _edit_table(data_root, 0, number, lambda v: v - 1e-9 * abs(v))
    _only_failure(outcomes(data_root), 0, number, check)


def test_flipped_dual_entry_fails(data_root):
    def flip(e):
        z = e["r2/second_order/z"]
        nonneg = slice(int(e["r2/second_order/dims"][0]), int(e["r2/second_order/dims"][0] + e["r2/second_order/dims"][1]))
        k = nonneg.start + int(np.argmax(z[nonneg]))
        z[k] = -z[k]
    _edit_certificates(data_root, flip)
    _only_failure(outcomes(data_root), 2, "second_order", "dual_cone")


def test_witness_outside_the_ball_fails(data_root):
    def move(e):
        e["r0/exact/witness_delta"][0, 0] = 2 * 0.01
    _edit_certificates(data_root, move)
    _only_failure(outcomes(data_root), 0, "exact_lo", "witness_ball")


def test_certificate_with_another_layers_weights_fails(data_root):
    for suffix in ("", ".json"):  # layer 1's weights under layer 0's name, sidecar and all
        (data_root / "extract" / MODEL / f"layer0.npz{suffix}").write_bytes(
            (data_root / "extract" / MODEL / f"layer1.npz{suffix}").read_bytes())
    bad = failures(outcomes(data_root))
    certified = ("first_order", "second_order", "second_order_tight", "exact_lo", "exact_hi")
    assert set(bad.row) == set(range(16)) and set(bad.number) == set(certified)
    assert set(bad[bad.number == "first_order"].check) <= {"intervals", "reduction"}


@pytest.mark.parametrize("damage", ["truncate", "edit"])
def test_damaged_extracted_weights_stop_with_one_line(data_root, damage, capsys):
    path = data_root / "extract" / MODEL / "layer0.npz"
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2] if damage == "truncate" else raw[:100] + bytes([raw[100] ^ 1]) + raw[101:])
    with pytest.raises(IntermediateError, match="layer0.npz"):
        audit_layer(data_root, MODEL, 0)
    assert main(["--model", MODEL, "--layer", "0", "--data", str(data_root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if "attncert audit:" in line]) == 1
    assert "regenerate it with: snakemake" in err[-1] and "layer0.npz" in err[-1]


def test_command_line_rows_and_outputs(certified_root, tmp_path, capsys):
    out = tmp_path / "audit"
    assert main(["--model", MODEL, "--layer", "0", "--rows", "0-2,5", "--data", str(certified_root),
                 "--out", str(out)]) == 0
    df = pd.read_csv(str(out) + ".csv")
    assert sorted(set(df.row)) == [0, 1, 2, 5]
    md = (tmp_path / "audit.md").read_text()
    assert "| **all** |" in md and "Baseline rows" in md
    assert "Failures: 0." in capsys.readouterr().out


def test_second_order_certificate_records_the_program(certified_root):
    with CertificateFile(certified_root / "certify" / MODEL / "layer0_certificates.npz") as f:
        row = f.row(0)
    assert json.loads(json.dumps(row["unit"]))["mode"] in ("fixed", "varying")
    so = row["second_order"]
    if str(so["kind"]) == "dual":
        A = f.matrix(so["A_rows"], so["A_shape"]) if False else None  # closed file: the matrix is read in audit_layer
        assert so["z"].size == so["b"].size and so["lo"].size == so["c"].size and A is None


def test_every_program_is_rebuilt(certified_root):
    df = outcomes(certified_root)
    so = df[df.number.isin(["second_order", "second_order_tight"]) & (df.status == "pass")]
    dual = so[so.check != "first_order_bound"]
    assert set(dual["mode"]) == {"fixed", "varying"} and set(dual["norm"]) == {"linf", "l2"}
    assert (dual.check == "program+dual_cone+weak_duality").all(), dual[["row", "check", "reason"]]


@pytest.mark.parametrize("row", [0, 2])  # a fixed and a varying query
@pytest.mark.parametrize("field", ["pool/data", "b", "c", "build/eps"])
def test_edited_program_float_fails(data_root, field, row):
    def edit(e):
        if field == "pool/data":
            rows = e[f"r{row}/second_order/A_rows"]
            start = int(e["pool/indptr"][rows[len(rows) // 2]])
            e["pool/data"][start] *= 1.0 + 1e-12
        else:
            name = field if row == 2 or field != "build/eps" else "build/eps_s"
            vec = e[f"r{row}/second_order/{name}"]
            k = int(np.argmax(np.abs(vec)))
            vec[k] = np.nextafter(vec[k], np.inf)
    _edit_certificates(data_root, edit)
    bad = failures(outcomes(data_root))
    hit = bad[(bad.row == row) & (bad.number == "second_order")]
    assert len(hit) == 1 and hit.iloc[0]["check"] == "program", bad[["row", "number", "check", "reason"]]


def test_no_solver_runs_during_the_audit(certified_root, monkeypatch):
    import clarabel
    import cvxpy as cp

    def refuse(*a, **k):
        raise AssertionError("a solver was called during the audit")

    monkeypatch.setattr(clarabel, "DefaultSolver", refuse)
    monkeypatch.setattr(cp.Problem, "solve", refuse)
    assert failures(outcomes(certified_root, 1)).empty


def test_audit_one_row_example_prints_every_step(certified_root):
    import subprocess
    import sys

    from conftest import REPO

    out = subprocess.run([sys.executable, str(REPO / "examples" / "audit_one_row.py"), "--model", MODEL, "--layer",
                          "0", "--row", "0", "--data", str(certified_root)], capture_output=True, text=True,
                         check=True).stdout
    for step in ("1. reduction", "5a. first_order", "2. dual in K^*", "3. (WD)", "4. exact_lo", "5b. exact_hi"):
        assert step in out, out
    assert "rebuilt bit for bit: True" in out


def test_certificate_file_is_byte_reproducible(certified_root, tmp_path):
    """The same certificates give the same bytes (no timestamps): a rerun or a cluster run compares equal."""
    import time

    src = certified_root / "certify" / MODEL / "layer0_certificates.npz"
    with CertificateFile(src) as f:
        entries = {k: np.array(f.array(k)) for k in f.keys}
    write_certificates(tmp_path / "a.npz", entries)
    time.sleep(2.1)  # zip timestamps have a 2 s resolution
    write_certificates(tmp_path / "b.npz", entries)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


@pytest.mark.parametrize("compression", ["ZIP_LZMA", "ZIP_STORED"])
def test_certificate_file_reads_back_whatever_its_compression(certified_root, tmp_path, compression):
    """Files written with another zip compression (LZMA: the format's earlier default) read back bit for bit
    and pass the audit like the deflate file the pipeline writes."""
    import zipfile

    root = tmp_path / "data"
    shutil.copytree(certified_root, root)
    path = root / "certify" / MODEL / "layer0_certificates.npz"
    with CertificateFile(path) as f:
        entries = {k: np.array(f.array(k)) for k in f.keys}
    write_certificates(path, entries, compression=getattr(zipfile, compression))
    write_sidecar(path, provenance({"code": "t"}, stage="certify"))
    with zipfile.ZipFile(path) as z:
        assert {i.compress_type for i in z.infolist()} == {getattr(zipfile, compression)}
    with CertificateFile(path) as f:
        assert all(f.array(k).tobytes() == v.tobytes() and f.array(k).dtype == v.dtype for k, v in entries.items())
    records = audit_layer(root, MODEL, 0)
    assert records and all(r["status"] in ("pass", "not applicable") for r in records)
