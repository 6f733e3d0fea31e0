"""The audit confirms every certified number of a tiny certified layer, and each tampering makes it fail on the
right row and check."""
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attncert.audit.audit_table import audit_layer, main
from attncert.certify.certificate_store import CertificateFile, write_certificates
from attncert.certify.layer_run import certify_layer_units
from attncert.head.units import grid, specification_vectors, write_specification
from attncert.integrity.intermediate_check import IntermediateError
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar
from intermediate_files import tiny_layer_arrays

MODEL = "m"
QP = 3


def write_layer(root, layer: int, seed: int = 0, qps=(QP,)):
    arrays = tiny_layer_arrays()
    if seed:
        rng = np.random.default_rng(seed)
        arrays = {
            k: (v + 0.3 * rng.standard_normal(v.shape) if v.dtype == np.float64 else v) for k, v in arrays.items()
        }
    ext = root / "extract" / MODEL / f"layer{layer}.npz"
    with atomic_path(ext) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    write_sidecar(ext, provenance({"code": "t"}, stage="extract", model_id=MODEL, layer=layer))
    base = root / "certify" / MODEL
    spec = specification_vectors(arrays, layer, list(qps), 0)
    write_specification(base / f"layer{layer}_spec.npz", spec, list(qps), layer, 0)
    units = grid([0, 1], [0], list(qps), [0.01, 0.2], ["linf", "l2"], ["fixed", "varying"], layer)
    df, entries, pool = certify_layer_units(arrays, spec, list(qps), units, layer, ascent_check_fraction=0.0)
    write_certificates(base / f"layer{layer}_certificates.npz", entries, pool)
    write_sidecar(base / f"layer{layer}_certificates.npz", provenance({"code": "t"}, stage="certify"))
    with atomic_path(base / f"layer{layer}.csv") as tmp:
        df.to_csv(tmp, index=False, float_format="%.17g")
    write_sidecar(base / f"layer{layer}.csv", provenance({"code": "t"}, stage="certify"))
    return df


RUN_CONFIG = {"model": {"name": MODEL}, "n_prompts": 1, "spec_seed": 0,
              "certify": {"prompts": [0], "query_positions": [QP], "radii": [0.01, 0.2], "norms": ["linf", "l2"],
                          "modes": ["fixed", "varying"]}}


def write_run_config(root, config=RUN_CONFIG, resolved=None):
    """The run's recorded configuration, as the workflow's `run_configuration` rule writes it."""
    from attncert.audit.run_configuration import run_configuration_path, write_run_configuration

    path = run_configuration_path(root, MODEL)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_run_configuration(path, config, resolved or {"layers": [0, 1], "heads": [0, 1], "block_transitions": []})
    write_sidecar(path, provenance({"code": "t"}, stage="run_configuration", model_id=MODEL))
    return path


@pytest.fixture(scope="session")
def certified_root(tmp_path_factory):
    """data/ of two tiny certified layers (layer 1 has other weights) and the run's configuration, built once."""
    root = tmp_path_factory.mktemp("audit") / "data"
    write_layer(root, 0)
    write_layer(root, 1, seed=1)
    write_run_config(root)
    return root


def _factored_dispatch(mp):
    """Every varying unit takes the cvxpy programs of `factored` alone (the long program is not tried beside them)."""
    import attncert.certify.second_order.certificate as sc

    mp.setattr(sc, "VARYING_LONG_ABOVE", 10**9)


@pytest.fixture(scope="session")
def factored_root(tmp_path_factory):
    """data/ of a tiny certified layer whose varying units all keep the cvxpy programs' certificates."""
    mp = pytest.MonkeyPatch()
    _factored_dispatch(mp)
    root = tmp_path_factory.mktemp("factored") / "data"
    try:
        write_layer(root, 0)
        write_run_config(root)
    finally:
        mp.undo()
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
        assert len(df) == 16 * 6
        assert failures(df).empty, failures(df)[["row", "number", "check", "margin", "reason"]].to_string()
        fixed = df[df["mode"] == "fixed"]
        assert (fixed.status == "pass").all()
        varying_exact = df[(df["mode"] == "varying") & df.number.isin(["exact_lo", "exact_hi"])]
        assert (varying_exact.status == "not applicable").all()
        assert (df[(df["mode"] == "varying") & ~df.number.isin(["exact_lo", "exact_hi"])].status == "pass").all()


def _edit_table(root, row, column, fn, layer=0):
    path = root / "certify" / MODEL / f"layer{layer}.csv"
    df = pd.read_csv(path)
    df[column] = df[column].astype(object)  # a tamperer may write any text
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
        nonneg = slice(
            int(e["r2/second_order/dims"][0]), int(e["r2/second_order/dims"][0] + e["r2/second_order/dims"][1])
        )
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
    certified = ("first_order", "second_order", "second_order_tight", "exact_lo", "exact_hi", "best_feasible")
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


@pytest.mark.parametrize("tamper", ["support_t_moved", "support_t_nan", "support_t_too_many", "support_cut_dropped"])
def test_factored_varying_support_cuts_tampering_fails(factored_root, tmp_path, tamper):
    """The factored (cvxpy) program's keys' support cuts are rebuilt from their stored multipliers: another valid
    multiplier, a NaN, more multipliers than the program has slots, or none at all is not the program the bound was
    computed on."""
    row = VARYING_LINF
    data_root = tmp_path / "data"
    shutil.copytree(factored_root, data_root)

    def edit(e):
        key = f"r{row}/second_order/build/support_t"
        assert str(e[f"r{row}/second_order/build/path"]) == "varying_factored" and e[key].size
        if tamper == "support_t_moved":
            e[key][-1] += 1e-6
        elif tamper == "support_t_nan":
            e[key][0] = np.nan
        elif tamper == "support_t_too_many":
            e[key] = np.concatenate([e[key]] * 3)
        else:
            del e[key]
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


# --- forgeries a skeptic would try: each must fail the right check -------------------------------------------------

FIXED_LINF, FIXED_L2, VARYING_LINF = 0, 4, 2  # rows of the tiny grid (head 0, r = 0.01)


def _row_of(df, head=0, radius=0.01, norm="linf", mode="fixed"):
    hit = df[(df["head"] == head) & (df["radius"] == radius) & (df["norm"] == norm) & (df["mode"] == mode)]
    return int(hit.index[0])


def test_grid_rows_are_where_the_tamper_tests_expect_them(certified_root):
    df = pd.read_csv(certified_root / "certify" / MODEL / "layer0.csv")
    assert _row_of(df) == FIXED_LINF and _row_of(df, norm="l2") == FIXED_L2
    assert _row_of(df, mode="varying") == VARYING_LINF


def _hit(df, row, number):
    hit = df[(df.row == row) & (df.number == number)]
    assert len(hit) == 1
    return hit.iloc[0]


@pytest.mark.parametrize("field, value", [("affine", lambda a: a + np.array([0.0, 0.0, -0.4])),
                                          ("affine", lambda a: a + np.array([-0.4, 0.0, 0.0])),
                                          ("data_rel_err", lambda e: np.float64(-1e-3))])
@pytest.mark.parametrize("row", [FIXED_LINF, VARYING_LINF])
def test_stored_map_to_g_or_data_error_model_is_not_trusted(data_root, field, value, row):
    """The tail, origin and data-error model are re-derived: a forged one fails `program`, whatever value the
    table then reports."""
    def edit(e):
        key = f"r{row}/second_order/{field}"
        e[key] = value(e[key])
    _edit_certificates(data_root, edit)
    _edit_table(data_root, row, "second_order", lambda v: v - 0.4)
    got = _hit(outcomes(data_root), row, "second_order")
    assert got.status == "fail" and got.check == "program", got.reason


def _set_scaling(e, row, field, value):
    """Replace row's stored bilinear scaling `field` (a shared array) by its own array `value` (None: drop it)."""
    e.pop(f"r{row}/first_order/{field}@shared", None)
    if value is not None:
        e[f"r{row}/first_order/{field}"] = value


def test_bilinear_scalings_are_stored_once_per_head(certified_root):
    """Every linf varying row of a head points to the same shared scalings; no other row stores any."""
    with CertificateFile(certified_root / "certify" / MODEL / "layer0_certificates.npz") as f:
        keys = set(f.keys)
        df = pd.read_csv(certified_root / "certify" / MODEL / "layer0.csv")
        ids = {}
        for r, row in df.iterrows():
            stored = {k for k in keys if k.startswith(f"r{r}/first_order/scale_")}
            if row["norm"] == "linf" and row["mode"] == "varying":
                assert stored == {f"r{r}/first_order/scale_q@shared", f"r{r}/first_order/scale_k@shared"}
                ids.setdefault(row["head"], set()).add(tuple(int(f.array(k)) for k in sorted(stored)))
                s = f.row(r)["first_order"]["scale_q"]
                assert s.dtype == np.float64 and s.shape == (6,) and np.all(s > 0)
            else:
                assert not stored
    assert all(len(v) == 1 for v in ids.values()) and len(ids) == 2


@pytest.mark.parametrize("field, value, reason", [
    ("scale_q", lambda s: np.zeros_like(s), "not positive"), ("scale_k", lambda s: -s, "not positive"),
    ("scale_q", lambda s: np.where(np.arange(s.size) == 1, np.nan, s), "not finite"),
    ("scale_k", lambda s: np.where(np.arange(s.size) == 0, np.inf, s), "not finite"),
    ("scale_q", lambda s: s[:-1], "expected (6,)"), ("scale_k", lambda s: None, "no stored bilinear scalings")])
def test_invalid_bilinear_scalings_fail_the_row(data_root, field, value, reason):
    """Scalings that are not positive finite vectors of length d, or missing, fail the linf varying row (its
    first-order intervals, and its second-order data's bilinear bound), and no other row."""
    def edit(e):
        s = np.array(e[f"arrays/{int(e[f'r{VARYING_LINF}/first_order/{field}@shared'])}"])
        _set_scaling(e, VARYING_LINF, field, value(s))
    _edit_certificates(data_root, edit)
    bad = failures(outcomes(data_root))
    assert set(bad.row) == {VARYING_LINF}, bad[["row", "number", "check", "reason"]].to_string()
    fo = _hit(bad, VARYING_LINF, "first_order")
    assert fo.check == "intervals" and reason in fo.reason, fo.reason
    so = _hit(bad, VARYING_LINF, "second_order")
    assert so.check in ("program", "first_order:intervals") and reason in so.reason, so.reason


def test_shrunk_beta_with_honest_scalings_fails(data_root):
    """First-order intervals built with 0.9 beta (the stored beta shrunk alike, the scalings honest) fail."""
    df = pd.read_csv(data_root / "certify" / MODEL / "layer0.csv")
    r = float(df.loc[VARYING_LINF, "radius"])

    def edit(e):
        pre = f"r{VARYING_LINF}/first_order/"
        beta = float(e[pre + "beta"])
        cut = 0.1 * r * r * beta / np.sqrt(3.0)  # d_h = 3: the bilinear part of every score half-width, 10 %
        e[pre + "l"], e[pre + "u"], e[pre + "beta"] = e[pre + "l"] + cut, e[pre + "u"] - cut, np.float64(0.9 * beta)
    _edit_certificates(data_root, edit)
    fo = _hit(failures(outcomes(data_root)), VARYING_LINF, "first_order")
    assert fo.check == "intervals" and "score" in fo.reason, fo.reason


def test_forged_positive_scalings_only_loosen_the_audits_bound(data_root):
    """Any positive finite scalings are a valid bound: with forged ones the audit's beta is the smaller of the
    unscaled bounds and theirs, so the row passes only if its intervals still enclose the exact scores."""
    from flint import ctx

    from attncert.audit.head_enclosure import PREC, LayerFiles

    def edit(e):
        _set_scaling(e, VARYING_LINF, "scale_q", np.full(6, 7.0))
        _set_scaling(e, VARYING_LINF, "scale_k", np.geomspace(0.1, 10.0, 6))
    _edit_certificates(data_root, edit)
    files = LayerFiles(data_root / "extract" / MODEL / "layer0.npz", data_root / "certify" / MODEL / "layer0_spec.npz")
    head = files.unit(0, 0, QP)
    old, ctx.prec = ctx.prec, PREC
    try:
        unscaled = float(head.bilinear_bound("linf").upper())
        forged = float(head.bilinear_bound("linf", (np.full(6, 7.0), np.geomspace(0.1, 10.0, 6))).upper())
    finally:
        ctx.prec = old
    assert forged <= unscaled  # the min with the unscaled bounds: a forged pair never raises the audit's beta
    got = _hit(outcomes(data_root), VARYING_LINF, "first_order")
    assert got.status == "pass" or (got.check == "intervals" and "score" in got.reason), got.reason


def _copy_program(e, src, dst, name="second_order"):
    """Row src's certificate `name` in place of row dst's (every entry of it)."""
    for k in [k for k in e if k.startswith(f"r{dst}/{name}/")]:
        del e[k]
    for k in [k for k in e if k.startswith(f"r{src}/{name}/")]:
        e[k.replace(f"r{src}/", f"r{dst}/", 1)] = e[k]


def _drop_build(e, row, name="second_order"):
    for k in [k for k in e if k.startswith(f"r{row}/{name}/build/")]:
        del e[k]


def test_certificate_without_builder_inputs_fails(data_root):
    _edit_certificates(data_root, lambda e: _drop_build(e, FIXED_LINF))
    got = _hit(outcomes(data_root), FIXED_LINF, "second_order")
    assert got.status == "fail" and got.check == "program" and "cannot be rebuilt" in got.reason


def test_certificate_of_a_smaller_radius_without_builder_inputs_fails_on_the_larger_radius_row(data_root):
    """r = 0.01's certificate (unit and builder inputs removed) on the r = 0.2 row of the same unit."""
    df = pd.read_csv(data_root / "certify" / MODEL / "layer0.csv")
    big = _row_of(df, radius=0.2)

    def swap(e):
        _copy_program(e, FIXED_LINF, big)
        _drop_build(e, big)
    _edit_certificates(data_root, swap)
    _edit_table(data_root, big, "second_order", lambda v: float(df.loc[FIXED_LINF, "second_order"]))
    got = _hit(outcomes(data_root), big, "second_order")
    assert got.status == "fail" and got.check == "program"


def _replace_program(root, row, name, cert, layer=0):
    """Row `row`'s `name` certificate replaced by the DualCertificate `cert` (the layer's row pool rebuilt)."""
    from attncert.certify.certificate_store import RowPool, _dual_arrays

    path = root / "certify" / MODEL / f"layer{layer}_certificates.npz"
    pool = RowPool()
    with CertificateFile(path) as f:
        entries = {k: np.array(f.array(k)) for k in f.keys if not k.startswith("pool/")}
        for k in [k for k in entries if k.endswith("/A_rows")]:
            entries[k] = pool.add(f.matrix(entries[k], entries[k[:-len("A_rows")] + "A_shape"]))
    for k in [k for k in entries if k.startswith(f"r{row}/{name}/")]:
        del entries[k]
    entries.update({f"r{row}/{name}/{k}": v for k, v in _dual_arrays(cert, pool).items()})
    write_certificates(path, entries, pool)
    write_sidecar(path, provenance({"code": "t"}, stage="certify"))


def test_l2_program_honestly_solved_fails_on_the_linf_row(data_root):
    """The l_inf row's own relaxation data, built into the l2 program (the ellipse inside the zonotope) and
    honestly solved and certified: rebuilt bit for bit, but not the row's unit."""
    from attncert.certify.second_order.dual_bound.compiled import canonical_program  # noqa: F401 - the builders' path
    from attncert.certify.second_order.dual_bound.solve_ladder import solve_and_certify
    from attncert.certify.second_order.dual_bound.dual_record import note_affine, note_construction, recording_duals
    from attncert.certify.second_order.fixed_query.program import (FixedRelaxationData, build_fixed_program, fixed_box,
                                                             set_fixed_parameters)

    with CertificateFile(data_root / "certify" / MODEL / "layer0_certificates.npz") as f:
        row = f.row(FIXED_LINF)
    b, red = row["second_order"], row["reduction"]
    n, _, _, upper_cone, mono, deviation = json.loads(str(b["build/key"]))
    D = FixedRelaxationData(A=b["build/A"], w0=b["build/w0"], g0=float(b["build/g0"]), eps_s=b["build/eps_s"],
                            eps_w=b["build/eps_w"], u_s=red["u_s"], u_w=red["u_w"], R_s=float(b["build/R_s"]),
                            R_w=float(b["build/R_w"]), rho_w=float(b["build/rho_w"]), rho_o=float(b["build/rho_o"]),
                            radius=float(b["build/radius"]), norm="linf", tail=float(b["build/tail"]))
    with recording_duals() as rec:
        note_construction(reset=True, path="fixed", key=(n, "l2", 0, upper_cone, mono, deviation), data=D)
        prob, P, V = build_fixed_program(int(n), "l2", 0, upper_cone, mono, deviation)
        _, _, tau_lo, tau_hi = set_fixed_parameters(P, D)
        cert = solve_and_certify(prob, fixed_box(V, int(n), tau_lo, tau_hi, D))
        note_affine(D.g0, D.rho_o, D.tail)
    assert cert.converged and rec.best is not None
    _replace_program(data_root, FIXED_LINF, "second_order", rec.best)
    _edit_table(data_root, FIXED_LINF, "second_order", lambda v: rec.best.value)
    got = _hit(outcomes(data_root), FIXED_LINF, "second_order")
    assert got.status == "fail" and got.check == "program" and "l2" in got.reason


@pytest.mark.parametrize("src, dst", [(FIXED_LINF, VARYING_LINF), (VARYING_LINF, FIXED_LINF)])
def test_certificate_of_the_other_query_mode_fails(data_root, src, dst):
    """A fixed-query certificate in the varying-query row of the same unit (and the reverse), value and all."""
    value = float(pd.read_csv(data_root / "certify" / MODEL / "layer0.csv").loc[src, "second_order"])

    _edit_certificates(data_root, lambda e: _copy_program(e, src, dst))
    _edit_table(data_root, dst, "second_order", lambda v: value)
    got = _hit(outcomes(data_root), dst, "second_order")
    assert got.status == "fail" and got.check == "program" and "query row" in got.reason


def test_table_status_unsound_fails_the_row(data_root):
    _edit_table(data_root, FIXED_LINF, "status", lambda v: "UNSOUND")
    df = outcomes(data_root)
    row = df[df.row == FIXED_LINF]
    assert (row.status == "fail").all() and set(row.check) == {"table_status"}
    assert set(failures(df).row) == {FIXED_LINF}


def test_a_builder_bug_shared_by_certifier_and_checker_is_caught_by_the_cross_checks(tmp_path, monkeypatch):
    """A wrong dropped-token rule (it drops the token with the largest score, with no tail): the certifier and
    the audit build the same wrong programs, and only the cross-checks against the audited witnesses catch the
    certificates that lie below the attained value."""
    from attncert.head.reduced_geometry import ReducedGeometry

    def buggy(self):
        keep = np.ones(len(self.s0), dtype=bool)
        keep[int(np.argmax(np.asarray(self.s0) + np.asarray(self.w0)))] = False
        return keep, 0.0
    monkeypatch.setattr(ReducedGeometry, "kept_tokens", buggy)
    root = tmp_path / "data"
    df_table = write_layer(root, 0)
    df = outcomes(root)
    bad_rows = set(df_table.index[df_table.status == "UNSOUND"])
    assert bad_rows, "the simulated bug must make some certificate wrong"
    so = df[(df["mode"] == "fixed") & df.number.isin(["second_order", "second_order_tight"])]
    wrong = so[so.row.isin(bad_rows)]
    assert len(wrong) and (wrong.status == "fail").all()
    assert set(wrong.check) <= {"covers_attained", "table_status"} and "covers_attained" in set(wrong.check)


@pytest.mark.parametrize("edit, check", [
    ("delete", "certificate"), ("-inf", "reported"), ("nan", "reported"), ("text", "reported")])
def test_missing_or_non_finite_second_order_fails(data_root, edit, check):
    if edit == "delete":
        def drop(e):
            for k in [k for k in e if k.startswith(f"r{FIXED_LINF}/second_order/")]:
                del e[k]
        _edit_certificates(data_root, drop)
        _edit_table(data_root, FIXED_LINF, "second_order", lambda v: 1.0)
    else:
        _edit_table(data_root, FIXED_LINF, "second_order", lambda v: {"-inf": -np.inf, "nan": np.nan,
                                                                       "text": "abc"}[edit])
    got = _hit(outcomes(data_root), FIXED_LINF, "second_order")
    assert got.status == "fail" and got.check == check


@pytest.mark.parametrize("number", ["exact_lo", "exact_hi"])
def test_made_up_exact_value_in_a_varying_row_fails(data_root, number):
    _edit_table(data_root, VARYING_LINF, number, lambda v: 0.5)
    got = _hit(outcomes(data_root), VARYING_LINF, number)
    assert got.status == "fail" and got.check == "empty_cell"


def test_non_finite_exact_hi_fails_without_a_traceback(data_root):
    _edit_table(data_root, FIXED_LINF, "exact_hi", lambda v: np.inf)
    got = _hit(outcomes(data_root), FIXED_LINF, "exact_hi")
    assert got.status == "fail" and got.check == "reported"


def _coverage(**over):
    from attncert.audit.table_coverage import CoverageConfig

    cfg = {"n_prompts": 1, "certify": {"query_positions": [QP], "radii": [0.01, 0.2], "norms": ["linf", "l2"],
                                       "modes": ["fixed", "varying"]} | over}
    return CoverageConfig.from_config(cfg, layers=[0], heads=[0, 1])


def test_the_configured_grid_is_complete(certified_root):
    df = pd.DataFrame(audit_layer(certified_root, MODEL, 0, coverage=_coverage()))
    assert failures(df).empty and len(df) == 16 * 6


def test_a_table_that_lost_rows_fails(data_root):
    path = data_root / "certify" / MODEL / "layer0.csv"
    pd.read_csv(path).iloc[:10].to_csv(path, index=False, float_format="%.17g")
    write_sidecar(path, provenance({"code": "t"}, stage="certify"))
    df = pd.DataFrame(audit_layer(data_root, MODEL, 0, coverage=_coverage()))
    missing = df[(df.number == "row") & (df.status == "fail")]
    assert len(missing) == 6 and set(missing.check) == {"completeness"}


def test_a_grid_radius_the_table_does_not_hold_fails(certified_root):
    df = pd.DataFrame(audit_layer(certified_root, MODEL, 0, coverage=_coverage(radii=[0.01, 0.05])))
    reasons = set(df[(df.number == "row")].reason)
    assert {"row not in the configuration's grid", "unit of the configuration missing from the table"} <= reasons


def test_unfactored_varying_program_is_rebuilt(tmp_path, monkeypatch):
    """Varying units below the factored program's width threshold take the unfactored program (here every unit:
    the threshold raised): its builder inputs are stored and the audit rebuilds it."""
    import attncert.certify.second_order.varying_query.factored as vf

    monkeypatch.setattr(vf, "DEVIATION_BELOW", 1e9)
    _factored_dispatch(monkeypatch)
    root = tmp_path / "data"
    write_layer(root, 0)
    with CertificateFile(root / "certify" / MODEL / "layer0_certificates.npz") as f:
        paths = {str(f.row(r)["second_order"].get("build/path", "")) for r in f.rows
                 if f.row(r)["unit"]["mode"] == "varying" and str(f.row(r)["second_order"]["kind"]) == "dual"}
    assert paths == {"varying_unfactored"}
    df = outcomes(root)
    dual = df[(df["mode"] == "varying") & df.number.isin(["second_order", "second_order_tight"])
              & (df.check != "first_order_bound")]
    assert len(dual) and (dual.check == "program+dual_cone+weak_duality").all(), dual[["row", "check", "reason"]]


def _one_shot_everywhere(mp):
    """Every varying cvxpy program compiled without cvxpy's parameter tensor (as above ONE_SHOT_ABOVE tokens)."""
    import attncert.certify.second_order.varying_query.program as vp
    import attncert.certify.second_order.varying_query.unfactored_program as vu

    for module in (vp, vu):
        mp.setattr(module, "ONE_SHOT_ABOVE", 1)
        mp.setattr(module, "_CACHE", {})


@pytest.mark.parametrize("tamper", [None, "program_entry", "lowered"])
def test_one_shot_varying_programs_are_rebuilt(tmp_path, monkeypatch, tamper):
    """The varying query's cvxpy programs above ONE_SHOT_ABOVE tokens are compiled per solve with their parameters
    as constants; the audit rebuilds them the same way and confirms every bound, and an edited program entry or a
    lowered bound fails."""
    import attncert.certify.second_order.varying_query.program as vp

    _one_shot_everywhere(monkeypatch)
    _factored_dispatch(monkeypatch)
    root = tmp_path / "data"
    write_layer(root, 0)
    assert vp._CACHE and all(prob._attncert_one_shot for prob, _, _ in vp._CACHE.values())
    rows = {r: p for r, p in _long_rows(root).items() if p == "varying_factored"}
    assert rows
    row = min(rows)
    if tamper == "lowered":
        _edit_table(root, row, "second_order", lambda v: v - 1e-9 * abs(v))
    elif tamper == "program_entry":
        def edit(e):
            A_rows = e[f"r{row}/second_order/A_rows"]
            e["pool/data"][int(e["pool/indptr"][A_rows[len(A_rows) // 2]])] *= 1.0 + 1e-12
        _edit_certificates(root, edit)
    df = outcomes(root)
    if tamper is None:
        dual = df[(df["mode"] == "varying") & df.number.isin(["second_order", "second_order_tight"])
                  & (df.check != "first_order_bound")]
        assert len(dual) and (dual.check == "program+dual_cone+weak_duality").all(), dual[["row", "check", "reason"]]
        assert not len(failures(df))
    else:
        bad = failures(df)
        hit = bad[(bad.row == row) & (bad.number == "second_order")]
        want = "weak_duality" if tamper == "lowered" else "program"
        assert len(hit) == 1 and hit.iloc[0]["check"] == want, bad[["row", "number", "check", "reason"]]


@pytest.fixture(scope="module")
def long_varying_root(tmp_path_factory):
    """data/ of a tiny layer whose varying units all keep the long-context program's certificate (no cvxpy programs
    beside it)."""
    import attncert.certify.second_order.varying_query.long as vl

    mp = pytest.MonkeyPatch()
    mp.setattr(vl, "BESIDE_MAX", 0)
    root = tmp_path_factory.mktemp("long") / "data"
    try:
        write_layer(root, 0)
    finally:
        mp.undo()
    return root


def _long_rows(root):
    with CertificateFile(root / "certify" / MODEL / "layer0_certificates.npz") as f:
        return {r: str(f.row(r)["second_order"].get("build/path", "")) for r in f.rows
                if f.row(r)["unit"]["mode"] == "varying" and str(f.row(r)["second_order"]["kind"]) == "dual"}


def test_long_context_varying_program_is_rebuilt(long_varying_root):
    """The long-context varying program (assembled without cvxpy, linked through d_h) stores its key-space fields;
    the audit re-derives them from the weights, rebuilds the program and confirms every bound."""
    paths = _long_rows(long_varying_root)
    assert paths and set(paths.values()) == {"varying_long"}
    df = outcomes(long_varying_root)
    dual = df[(df["mode"] == "varying") & df.number.isin(["second_order", "second_order_tight"])
              & (df.check != "first_order_bound")]
    assert len(dual) and (dual.check == "program+dual_cone+weak_duality").all(), dual[["row", "check", "reason"]]
    assert not len(failures(df))


@pytest.mark.parametrize("tamper, check", [("lowered", "weak_duality"), ("dual_sign", "dual_cone"),
                                           ("program_entry", "program"), ("key_direction", "program"),
                                           ("shift_factor", "program"), ("shift_weight_nan", "program"),
                                           ("shift_cut_dropped", "program"), ("support_t_moved", "program"),
                                           ("support_t_nan", "program"), ("support_cut_dropped", "program")])
def test_long_context_varying_tampering_fails(long_varying_root, tmp_path, tamper, check):
    """Every stored piece the audit rebuilds from: the bound, the dual, the program, the key directions, the
    moment cut of the query's shift (its factor F, its weights, the cut itself) and the keys' support cuts (their
    multipliers, the cuts themselves)."""
    root = tmp_path / "data"
    shutil.copytree(long_varying_root, root)
    row = min(_long_rows(root))
    if tamper == "lowered":
        _edit_table(root, row, "second_order", lambda v: v - 1e-9 * abs(v))
    else:
        def edit(e):
            pre = f"r{row}/second_order/"
            if tamper == "dual_sign":
                z, dims = e[pre + "z"], e[pre + "dims"]
                nonneg = slice(int(dims[0]), int(dims[0] + dims[1]))
                k = nonneg.start + int(np.argmax(z[nonneg]))
                z[k] = -z[k]
            elif tamper == "program_entry":
                rows = e[pre + "A_rows"]
                e["pool/data"][int(e["pool/indptr"][rows[len(rows) // 2]])] *= 1.0 + 1e-12
            elif tamper == "shift_factor":
                F = e[pre + "build/shift_F"]
                F.flat[int(np.argmax(np.abs(F)))] *= 1.0 + 1e-9
            elif tamper == "shift_weight_nan":
                e[pre + "build/shift_w"][0, 0] = np.nan
            elif tamper == "shift_cut_dropped":
                del e[pre + "build/shift_w"], e[pre + "build/shift_F"]
            elif tamper == "support_t_moved":  # another valid cut: not the program the bound was computed on
                e[pre + "build/support_t"][-1] += 1e-6
            elif tamper == "support_t_nan":
                e[pre + "build/support_t"][0] = np.nan
            elif tamper == "support_cut_dropped":
                del e[pre + "build/support_t"]
            else:
                key = next(k for k in e if k.startswith(pre + "build/kq"))
                kq = e[key] if not key.endswith("@shared") else e[f"arrays/{int(e[key])}"]
                kq.flat[int(np.argmax(np.abs(kq)))] *= 1.0 + 1e-9
        _edit_certificates(root, edit)
    bad = failures(outcomes(root))
    hit = bad[(bad.row == row) & (bad.number == "second_order")]
    assert len(hit) == 1 and hit.iloc[0]["check"] == check, bad[["row", "number", "check", "reason"]].to_string()


# --- bad input: one line, exit 2, no traceback --------------------------------------------------------------------

def _one_line_exit_2(args, capsys):
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip() and "%|" not in line]
    assert len(err) == 1 and err[0].startswith("attncert audit:") and ("fix" in err[0] or "regenerate" in err[0]), err
    return err[0]


@pytest.mark.parametrize("rows", ["a-b", "5-2", "-3", "99999", "0-2,99999", "", ","])
def test_malformed_or_empty_row_selection(certified_root, rows, capsys):
    line = _one_line_exit_2(["--model", MODEL, "--layer", "0", "--rows", rows, "--data", str(certified_root)], capsys)
    assert "--rows" in line


@pytest.mark.parametrize("damage", ["truncate", "no_format_version"])
def test_damaged_certificate_file_with_a_resigned_sidecar(data_root, damage, capsys):
    import zipfile

    path = data_root / "certify" / MODEL / "layer0_certificates.npz"
    if damage == "truncate":
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2])
    else:
        tmp = path.with_suffix(".tmp")
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w") as dst:
            for info in src.infolist():
                if info.filename != "format_version.npy":
                    dst.writestr(info, src.read(info.filename))
        tmp.replace(path)
    write_sidecar(path, provenance({"code": "t"}, stage="certify"))
    line = _one_line_exit_2(["--model", MODEL, "--layer", "0", "--data", str(data_root)], capsys)
    assert "layer0_certificates.npz" in line and "regenerate it with: snakemake" in line


@pytest.mark.parametrize("field, value", [("A_shape", lambda s: np.array([s[0], 10 ** 9], dtype=np.int64)),
                                          ("A_shape", lambda s: np.array([-1, 3], dtype=np.int64)),
                                          ("A_rows", lambda r: r + 10 ** 9),
                                          ("z", lambda z: z[:3])])
def test_malformed_stored_program_fails_its_row_without_a_crash(data_root, field, value):
    def edit(e):
        key = f"r{FIXED_LINF}/second_order/{field}"
        e[key] = value(e[key])
    _edit_certificates(data_root, edit)
    df = outcomes(data_root)
    assert set(failures(df).row) == {FIXED_LINF}
    assert set(failures(df).check) == {"certificate"}


def test_configfile_of_another_model_is_refused(certified_root, capsys):
    from conftest import REPO

    line = _one_line_exit_2(["--model", MODEL, "--configfile", str(REPO / "workflow/config/default.yaml"),
                             "--data", str(certified_root)], capsys)
    assert "all-MiniLM-L6-v2" in line


def test_margin_column_is_the_decisive_slack(certified_root):
    df = outcomes(certified_root)
    wd = df[df.check == "program+dual_cone+weak_duality"]
    assert (wd.margin > 0).all() and (wd.margin < 1e-6).all()
    assert wd.margins.str.contains("weak_duality=").all() and wd.margins.str.contains("program=ok").all()


def test_console_script_with_the_run_configuration(certified_root, tmp_path):
    """The README's `attncert audit --model M --configfile FILE` (and `--layer L --rows ...`) as a user runs it."""
    import subprocess
    import sys

    import yaml

    from conftest import REPO

    cfg = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
    cfg["model"]["name"] = MODEL
    cfg.update(n_prompts=1, layers=[0, 1], heads=[0, 1])
    for stage in ("long_context", "block"):  # the tiny run has none: with them, their missing tables would fail
        cfg.pop(stage)
    cfg["certify"].update(prompts=[0], query_positions=[QP], radii=[0.01, 0.2], norms=["linf", "l2"],
                          modes=["fixed", "varying"])
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    exe = str(Path(sys.executable).with_name("attncert"))
    # the tiny run is random arrays, no checkpoint and no summary tables: its certificates are what it has
    res = subprocess.run([exe, "audit", "--model", MODEL, "--configfile", str(path), "--data", str(certified_root),
                          "--part", "certificates"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Failures: 0." in res.stdout and "Completeness not checked" not in res.stdout
    res = subprocess.run([exe, "audit", "--model", MODEL, "--layer", "0", "--rows", "0-3", "--data",
                          str(certified_root)], capture_output=True, text=True)
    assert res.returncode == 0 and "Completeness not checked" in res.stdout, res.stderr[-2000:]
    res = subprocess.run([exe, "audit", "--model", MODEL, "--data", str(certified_root), "--part", "certificates"],
                         capture_output=True, text=True)  # the recorded configuration: completeness checked unasked
    assert res.returncode == 0 and "Failures: 0." in res.stdout and "Completeness not checked" not in res.stdout


def test_without_a_configfile_the_recorded_configuration_checks_completeness(data_root, capsys):
    """A row deleted (and the table re-signed) fails without --configfile: the audit reads the run's recorded
    configuration itself; without that record it stops with one line naming the fix."""
    path = data_root / "certify" / MODEL / "layer1.csv"
    df = pd.read_csv(path)
    with atomic_path(path) as tmp:
        df.iloc[1:].to_csv(tmp, index=False, float_format="%.17g")
    write_sidecar(path, provenance({"code": "t"}, stage="certify"))
    assert main(["--model", MODEL, "--data", str(data_root), "--part", "certificates"]) == 1
    out = capsys.readouterr().out
    assert "unit of the configuration missing from the table" in out
    (data_root / "run" / MODEL / "config.yaml").unlink()
    line = _one_line_exit_2(["--model", MODEL, "--data", str(data_root)], capsys)
    assert "config.yaml is missing" in line and "--configfile" in line


def test_a_missing_long_context_or_block_table_of_the_configured_run_fails(data_root, capsys):
    """The recorded configuration has a long-context and a block grid: their tables are missing, so the audit
    fails (before, a missing table was simply not audited)."""
    config = {**RUN_CONFIG, "block": {"prompt": 0, "query_position": QP, "radii": [0.001]},
              "long_context": {"layer": 0, "heads": [0], "lengths": [8], "query_position": 3, "radii": [0.01],
                               "norms": ["linf"], "modes": ["fixed"]}}
    write_run_config(data_root, config, {"layers": [0, 1], "heads": [0, 1], "block_transitions": [0]})
    assert main(["--model", MODEL, "--data", str(data_root), "--part", "certificates"]) == 1
    out = capsys.readouterr().out
    assert "long_context/m/units.csv is missing" in out.replace("\\", "/")
    assert "block/m/units.csv is missing" in out.replace("\\", "/")


@pytest.mark.parametrize("layer_args", [[], ["--layer", "0"]])
def test_a_model_without_results_names_the_run_to_make_not_a_target_for_it(certified_root, layer_args, capsys):
    """No target under another model's name is suggested (Snakemake refuses `{model}` outside the configuration)."""
    line = _one_line_exit_2(["--model", "gpt2", *layer_args, "--data", str(certified_root)], capsys)
    assert "no certification tables" in line and "certify/gpt2/layer" not in line and "--configfile" in line
