"""The long-context table's numbers: every one passes the audit, and each tampering fails on the right row and check.

A tiny long-context run (random weights, d = 6): lengths 8 and 56 (above 48 keys the fixed query's certificate is
a support-function certificate), fixed and varying query, both norms, certified and stored as the
long_context_certify job does; the audit re-derives every unit from the token arrays and the configuration.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from attncert.audit.audit_table import MALFORMED, _damaged
from attncert.audit.long_context_audit import LongContextConfig, audit_long_context
from attncert.certify.certificate_store import CertificateFile, write_certificates
from attncert.certify.long_context import certify_long_context, long_context_problems
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar
from intermediate_files import tiny_layer_arrays

MODEL = "m"
LC = dict(layer=1, heads=[0], lengths=[8, 56], query_position=3, radii=[0.05], norms=["linf", "l2"],
          modes=["fixed", "varying"], tight=True)
CFG = LongContextConfig.from_config({"long_context": LC, "spec_seed": 0})


def token_arrays() -> dict:
    """The long_context_extract job's arrays for a tiny bidirectional model: weights, W_O, Z_T at every length."""
    a = tiny_layer_arrays(H=1, d=6, dh=3)
    rng = np.random.default_rng(5)
    out = {k: a[k] for k in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O")}
    out["W_K"] = 0.5 * out["W_K"]
    out["causal"] = np.bool_(False)
    Z = rng.standard_normal((max(LC["lengths"]), 6))
    for T in LC["lengths"]:
        out[f"Z_{T}"] = Z[None, :T]
    return out


def _sign(path):
    write_sidecar(path, provenance({"code": "t"}, stage="long_context"))


@pytest.fixture(scope="session")
def lc_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("lc") / "data"
    base = root / "long_context" / MODEL
    base.mkdir(parents=True)
    arrays = token_arrays()
    with atomic_path(base / "layer_tokens.npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    _sign(base / "layer_tokens.npz")
    problems = long_context_problems(arrays, LC["layer"], LC["lengths"], LC["heads"], LC["query_position"],
                                     LC["radii"], LC["norms"], 0, LC["modes"])
    df, entries, pool = certify_long_context(problems, ascent_restarts=2, ascent_steps=40, seed=0, tight=True)
    write_certificates(base / "units_certificates.npz", entries, pool)
    with atomic_path(base / "units.csv") as tmp:
        df.to_csv(tmp, index=False, float_format="%.17g")
    for p in (base / "units.csv", base / "units_certificates.npz"):
        _sign(p)
    return root


@pytest.fixture
def data_root(lc_root, tmp_path):
    dst = tmp_path / "data"
    shutil.copytree(lc_root, dst)
    return dst


def outcomes(root, cfg=CFG):
    return pd.DataFrame(audit_long_context(root, MODEL, cfg, MALFORMED, _damaged))


def table(root):
    return pd.read_csv(root / "long_context" / MODEL / "units.csv")


def support_row(root, number="second_order") -> int:
    """A fixed-query row above 48 keys whose number is certified by a support-function certificate."""
    with CertificateFile(root / "long_context" / MODEL / "units_certificates.npz") as f:
        for r in f.rows:
            if str(f.row(r).get(number, {}).get("kind")) == "support":
                return r
    raise AssertionError("no support-function certificate stored")


def _edit_table(root, row, column, fn):
    path = root / "long_context" / MODEL / "units.csv"
    df = pd.read_csv(path)
    df[column] = df[column].astype(object)
    df.loc[row, column] = fn(df, row)
    df.to_csv(path, index=False, float_format="%.17g")
    _sign(path)  # a consistent tamperer: checksums match


def _edit_certificates(root, fn):
    path = root / "long_context" / MODEL / "units_certificates.npz"
    with CertificateFile(path) as f:
        entries = {k: np.array(f.array(k)) for k in f.keys}
    fn(entries)
    write_certificates(path, entries)
    _sign(path)


def _new_failures(df, lc_root):
    """The failures the tampering added: those of the untampered run are left out (whatever their state, every
    number's is asserted by test_every_long_context_number_passes)."""
    before = outcomes(lc_root)
    key = ["row", "number", "check"]
    old = set(map(tuple, before[before.status == "fail"][key].to_numpy().tolist()))
    bad = df[df.status == "fail"]
    return bad[[tuple(x) not in old for x in bad[key].to_numpy().tolist()]]


def _only_failure(df, lc_root, row, number, check):
    bad = _new_failures(df, lc_root)
    hit = bad[(bad.row == row) & (bad.number == number)]
    assert len(hit) == 1 and hit.iloc[0]["check"] == check, bad[["row", "number", "check", "reason"]].to_string()
    assert set(bad.row) == {row}, bad[["row", "number", "check", "reason"]].to_string()


def test_every_long_context_number_passes(lc_root):
    df = outcomes(lc_root)
    units = table(lc_root)
    assert len(units) == len(CFG.units()) == 8 and (units["status"] == "ok").all(), units[["status", "error"]]
    assert (df.status == "fail").sum() == 0, df[df.status == "fail"][["row", "number", "check", "reason"]].to_string()
    assert len(df) == 8 * 6 and set(df.table) == {"long_context"}
    varying = df[df["mode"] == "varying"]
    assert (varying[varying.number.isin(["exact_lo", "exact_hi"])].status == "not applicable").all()
    assert (df[~df.index.isin(varying[varying.number.isin(["exact_lo", "exact_hi"])].index)].status == "pass").all()
    long_fixed = df[(df["mode"] == "fixed") & (df.length.astype(int) == 56) & df.number.str.startswith("second")]
    assert (long_fixed.check == "program+dual_cone+support_duality").all(), long_fixed[["check", "reason"]]
    assert ((long_fixed.margin > 0) & (long_fixed.margin < 1e-6)).all()


@pytest.mark.parametrize("number", ["second_order", "second_order_tight"])
def test_lowered_support_bound_fails(data_root, lc_root, number):
    r = support_row(data_root, number)
    _edit_table(data_root, r, number, lambda df, i: df.loc[i, number] - 1e-9 * abs(df.loc[i, number]))
    _only_failure(outcomes(data_root), lc_root, r, number, "support_duality")


def test_lowered_varying_bound_fails(data_root, lc_root):
    r = int(table(data_root).query("mode == 'varying' and length == 8").index[0])
    _edit_table(
        data_root, r, "second_order", lambda df, i: df.loc[i, "second_order"] - 1e-9 * abs(df.loc[i, "second_order"])
    )
    _only_failure(outcomes(data_root), lc_root, r, "second_order", "weak_duality")


def test_flipped_dual_sign_fails(data_root, lc_root):
    r = support_row(data_root)

    def flip(e):
        z, dims = e[f"r{r}/second_order/z"], e[f"r{r}/second_order/dims"]
        nonneg = slice(int(dims[0]), int(dims[0] + dims[1]))
        k = nonneg.start + int(np.argmax(z[nonneg]))
        assert z[k] > 0
        z[k] = -z[k]
    _edit_certificates(data_root, flip)
    _only_failure(outcomes(data_root), lc_root, r, "second_order", "dual_cone")


@pytest.mark.parametrize("field", ["c", "build/eps_s", "build/rho_o", "t"])
def test_edited_program_entry_fails(data_root, lc_root, field):
    """One float of the stored token program, of its builder's inputs, or the multiplier t."""
    r = support_row(data_root)

    def edit(e):
        a = e[f"r{r}/second_order/{field}"]
        if a.ndim:
            k = int(np.argmax(np.abs(a)))
            a[k] = np.nextafter(a[k], np.inf)
        else:
            e[f"r{r}/second_order/{field}"] = np.float64(np.nextafter(float(a), np.inf))
    _edit_certificates(data_root, edit)
    _only_failure(outcomes(data_root), lc_root, r, "second_order", "program")


def test_a_lower_number_of_another_unit_fails(data_root, lc_root):
    """The second-order number of another unit (a smaller one) in a support row's cell."""
    r = support_row(data_root)
    units = table(data_root)
    lower = units[units["second_order"] < units.loc[r, "second_order"]]
    assert len(lower)
    other = int(lower.index[0])
    _edit_table(data_root, r, "second_order", lambda df, i: df.loc[other, "second_order"])
    _only_failure(outcomes(data_root), lc_root, r, "second_order", "support_duality")


def test_the_certificates_of_another_unit_fail_the_pairing(data_root, lc_root):
    """Two rows' certificates swapped (units, programs and all): both rows fail every number on `pairing`."""
    r = support_row(data_root)
    other = r + 1

    def swap(e):
        a, b = f"r{r}/", f"r{other}/"
        moved = {(b + k[len(a):] if k.startswith(a) else a + k[len(b):]): v for k, v in e.items()
                 if k.startswith((a, b))}
        for k in [k for k in e if k.startswith((a, b))]:
            del e[k]
        e.update(moved)
    _edit_certificates(data_root, swap)
    bad = _new_failures(outcomes(data_root), lc_root)
    assert set(bad.row) == {r, other} and set(bad.check) == {"pairing"}


def test_another_units_certificate_under_the_right_unit_fails_the_program(data_root, lc_root):
    """A support row's certificate replaced by the one of the same head at the other norm (its unit label kept)."""
    units = table(data_root)
    r = support_row(data_root)
    other = int(units[(units.length == units.loc[r, "length"]) & (units["mode"] == "fixed")
                      & (units.norm != units.loc[r, "norm"])].index[0])

    def transplant(e):
        for k in [k for k in e if k.startswith(f"r{r}/second_order/")]:
            del e[k]
        for k in [k for k in e if k.startswith(f"r{other}/second_order/")]:
            e[f"r{r}/" + k[len(f"r{other}/"):]] = e[k]
    _edit_certificates(data_root, transplant)
    _only_failure(outcomes(data_root), lc_root, r, "second_order", "program")


def test_a_missing_row_fails_completeness(data_root, lc_root):
    path = data_root / "long_context" / MODEL / "units.csv"
    df = pd.read_csv(path)
    df.iloc[:-1].to_csv(path, index=False, float_format="%.17g")
    _sign(path)
    bad = _new_failures(outcomes(data_root), lc_root)
    assert list(bad.check) == ["completeness"] and "missing" in bad.iloc[0]["reason"]


def test_without_a_configuration_the_rows_are_not_covered(lc_root):
    df = outcomes(lc_root, None)
    assert len(df) and (df.status == "not covered").all() and df.reason.str.contains("--configfile").all()


def test_no_solver_runs_during_the_long_context_audit(lc_root, monkeypatch):
    import clarabel
    import cvxpy as cp

    def refuse(*a, **k):
        raise AssertionError("a solver was called during the audit")

    with_solvers = outcomes(lc_root)
    monkeypatch.setattr(clarabel, "DefaultSolver", refuse)
    monkeypatch.setattr(cp.Problem, "solve", refuse)
    df = outcomes(lc_root)
    assert df[["row", "number", "status", "check"]].equals(with_solvers[["row", "number", "status", "check"]])
    assert (df[(df["mode"] == "fixed") & (df.length.astype(int) == 56)].status == "pass").all()


def test_console_script_audits_the_long_context_rows(lc_root, tmp_path):
    """`attncert audit --model M --configfile FILE` (README) on a run with a long-context table: its rows pass."""
    from conftest import REPO
    from test_audit import write_layer

    root = tmp_path / "data"
    shutil.copytree(lc_root, root)
    write_layer(root, 0)
    cfg = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())
    cfg["model"]["name"] = MODEL
    cfg.update(n_prompts=1, layers=[0], heads=[0, 1], long_context=dict(cfg["long_context"], **LC))
    cfg.pop("block")  # the tiny run has no block stage (its missing table would fail)
    cfg["certify"].update(prompts=[0], query_positions=[3], radii=[0.01, 0.2], norms=["linf", "l2"],
                          modes=["fixed", "varying"])
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    exe = str(Path(sys.executable).with_name("attncert"))
    out = tmp_path / "audit"
    res = subprocess.run([exe, "audit", "--model", MODEL, "--configfile", str(path), "--data", str(root), "--out",
                          str(out), "--part", "certificates"], capture_output=True, text=True)  # random arrays
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "Failures: 0." in res.stdout and "| long_context | second_order | 8 | 0 |" in res.stdout, res.stdout
    audit = pd.read_csv(str(out) + ".csv")
    assert set(audit[audit.table == "long_context"].length.astype(int)) == {8, 56}
