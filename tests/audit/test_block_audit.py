"""The audit of the block certificates (audit/block_audit.py) on tiny GPT-2 and BERT blocks written as the stage writes
them (extraction files, the block table, the stored duals of +-H0 + 2 r P per radius): every number of a certificate
column passes, its re-derived bound within the stage's cross slack, and each forgery fails the right check: a lowered
number or one without its beyond-quadratic part (`sum`), an edited, scaled or another radius's dual (`dual_pd` or
`sum`), a dual with a NaN or a negative entry or of the old (heads, d) shape (`pieces`), a reported number that is not
its bound (`reported`), a certificate hidden as +inf (`reported`), an edited weight with its sidecar rewritten
(`sum`), an edited weight without it (`weights`), another configuration's specification seed, a repeated, deleted or
foreign unit, a missing column, table or certificate file (`completeness`, `columns`, `certificate_file`), a
truncated certificate file, an unreadable cell; without a configuration the table fails."""
import numpy as np
import pytest
import torch

from attncert.audit.block_audit import BlockAuditConfig, audit_block
from attncert.block.build import transition_from_arrays
from attncert.head.specification import specification_rows
from attncert.block.certificate import certificate_file_arrays
from attncert.block.residual import analyze_transition, transition_table
from attncert.model.extraction import extract_layers, load_model
from attncert.provenance.provenance import write_sidecar

torch.set_num_threads(1)
RADII = [1e-3, 1e-2, 1.0]
PROMPT, POSITION, SPEC_SEED = 1, 3, 5
CFG = BlockAuditConfig(PROMPT, POSITION, SPEC_SEED, tuple(RADII), (1,), (0, 1))


def _stage(model_dir, family):
    name = f"tiny-{family}"
    loaded = load_model({"name": name, "family": family, "source": str(model_dir)})
    ids = np.random.default_rng(3).integers(100, 2000, size=(2, 6))
    arrays = extract_layers(loaded.model, family, ids, [1, 2])
    tr = transition_from_arrays(arrays[1], arrays[2], 1, PROMPT, POSITION)
    heads = [0, 1]
    C = specification_rows(arrays[2]["W_V"], arrays[2]["W_O"], 2, heads, PROMPT, POSITION, SPEC_SEED)
    keep = {}
    rows, timings = analyze_transition(tr, C, RADII, qp_starts=8, ascent_restarts=4, ascent_steps=30, seed=0,
                                       alpha_crown=False, keep=keep)
    df = transition_table(rows, timings, tr, heads, name, PROMPT)
    return name, arrays, df, certificate_file_arrays(keep["certificate"], heads)


@pytest.fixture(scope="module")
def gpt2_files(tiny_gpt2_dir):
    return _stage(tiny_gpt2_dir, "gpt2")


@pytest.fixture(scope="module")
def bert_files(tiny_bert_dir):
    return _stage(tiny_bert_dir, "bert")


@pytest.fixture(scope="module")
def gpt2_files_subgradient(tiny_gpt2_dir):
    """The stage's files with the SDP duals found by subgradient steps (the mixing method off): duals whose rank-one
    terms carry weight (t > 0), which the mixing method's duals never do (t = 0)."""
    import functools

    from attncert.block import residual
    from attncert.block.certificate import certify_transition

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(residual, "certify_transition", functools.partial(certify_transition, mixing=False))
        return _stage(tiny_gpt2_dir, "gpt2")


def _save(path, arrays):
    np.savez_compressed(path, **arrays)
    write_sidecar(path, {"stage": "test", "model": {"name": path.parent.name}})


def _write(root, files, df=None, certificate=None, layer_edit=None):
    name, layers, df0, cert0 = files
    d = root / "block" / name
    d.mkdir(parents=True, exist_ok=True)
    (root / "extract" / name).mkdir(parents=True, exist_ok=True)
    for L, arr in layers.items():
        _save(root / "extract" / name / f"layer{L}.npz", arr)
    (df0 if df is None else df).to_csv(d / "units.csv", index=False, float_format="%.17g")
    write_sidecar(d / "units.csv", {"stage": "test", "model": {"name": name}})
    _save(d / "transition1_certificates.npz", cert0 if certificate is None else certificate)
    return root, name


def _audit(root_name, cfg=CFG):
    return audit_block(root_name[0], root_name[1], cfg)


def _by(records, status=None, check=None):
    return [r for r in records if (status is None or r["status"] == status) and (check is None or r["check"] == check)]


def _second_order_row(df, column="certificate_f"):
    """The first row whose certificate in `column` is the Taylor model's (not the output LayerNorm's range cap)."""
    return int(np.flatnonzero(~df[column.replace("certificate_", "from_range_")].to_numpy(bool))[0])


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_every_certificate_number_passes_and_none_is_left_unchecked(family, request, tmp_path):
    files = request.getfixturevalue(f"{family}_files")
    df = files[2]
    recs = _audit(_write(tmp_path, files))
    assert len(recs) == 4 * len(df) and len(_by(recs, "pass")) == len(recs)
    cols = ["certificate_f", "certificate_g", "certificate_f_neg", "certificate_g_neg"]
    assert np.isfinite(df[cols].to_numpy()).all() and not _by(recs, check="infinite")   # the range cap is finite
    n_range = int(df[[c.replace("certificate_", "from_range_") for c in cols]].to_numpy(bool).sum())
    assert 0 < n_range < 4 * len(df)                               # r = 1 is beyond the Taylor model, 1e-3 is not
    assert len(_by(recs, "pass", "weights+layer_norm_range")) == n_range
    assert len(_by(recs, "pass", "weights+pieces+dual_pd+sum")) == 4 * len(df) - n_range
    for r in _by(recs, "pass", "weights+layer_norm_range"):       # the stage's cap is the audit's, raised by 2^-40
        assert 0 <= r["margin"] <= 1e-8 * abs(r["reported"]), r
    assert not [c for c in df.columns if c.endswith("_source")]      # no label decides what is checked
    # the bound re-derived from the weights lies below the stage's number by at least the stage's cross slack
    # (2^-40 |g(0)|, thousands of units in the last place: no BLAS thread count moves a verdict) and within a
    # relative 1e-2 of it (the same floats; the audit's constants are its own, no larger than the stage's: its
    # rounding allowances are 8 units, not 16, and its GELU derivative sups carry a safety factor of 1.2, not 1.25,
    # which moves the GELU nodes' remainders by up to 2 % where the box is wide); on boxes where the enclosure has
    # blown up (bounds above 1e3, e.g. 1e100 at r = 1 on the tiny BERT) those differences compound layer by layer,
    # so only the lower end is asserted there
    g0 = {(int(row["head"]), float(row["radius"])): abs(float(row["g0"])) for _, row in df.iterrows()}
    for r in _by(recs, "pass", "weights+pieces+dual_pd+sum"):
        scale = g0[(int(r["head"]), float(r["radius"]))]
        assert 2.0 ** -40 * scale <= r["margin"], r
        if abs(r["reported"]) <= 1e3:
            assert r["margin"] <= 1e-2 * abs(r["reported"]) + 2.0 ** -38 * scale, r


def test_a_lowered_number_fails_sum(gpt2_files, tmp_path):
    df = gpt2_files[2].copy()
    i = _second_order_row(df)
    for col in ("certificate_f", "second_order_certificate_f"):
        df.loc[i, col] = df.loc[i, col] * (1 - 1e-4)   # the audit re-derives it to within about 5e-6
    fails = _by(_audit(_write(tmp_path, gpt2_files, df=df)), "fail")
    assert [(r["row"], r["number"], r["check"]) for r in fails] == [(i, "certificate_f", "sum")]


def test_a_number_without_its_remainder_fails_sum(bert_files, tmp_path):
    """The part beyond the centre quadratic (cubic form and rest) is what makes the bound hold over the whole box: a
    table that drops half of it is caught."""
    df = bert_files[2].copy()
    i = int(np.flatnonzero(np.isfinite(df["certificate_f"].to_numpy()) & (df["certificate_remainder"] > 0))[0])
    dropped = df.loc[i, "certificate_f"] - 0.5 * df.loc[i, "certificate_remainder"]
    assert df.loc[i, "certificate_remainder"] > 0 and dropped > 0
    for col in ("certificate_f", "second_order_certificate_f"):
        df.loc[i, col] = dropped
    fails = _by(_audit(_write(tmp_path, bert_files, df=df)), "fail")
    assert [(r["row"], r["number"], r["check"]) for r in fails] == [(i, "certificate_f", "sum")]


def test_an_edited_dual_fails_dual_pd(gpt2_files, tmp_path):
    cert = dict(gpt2_files[3])
    y = cert["y_pos"].copy()
    y[:, 1] = 0.5 * y[:, 1]                   # head 1's duals halved: diag(y) - (H0 + 2 r P) not positive definite
    cert["y_pos"] = y
    fails = _by(_audit(_write(tmp_path, gpt2_files, certificate=cert)), "fail")
    assert fails and {r["check"] for r in fails} == {"dual_pd"}
    assert {str(r["head"]) for r in fails} == {"1"} and {r["number"] for r in fails} == {"certificate_f",
                                                                                         "certificate_g"}


def _taylor(df, numbers) -> set:
    """{(head, radius, number)} of the table's certificates among `numbers` that the Taylor model decides (not the
    output LayerNorm's range cap, which needs no dual)."""
    return {(str(row["head"]), float(row["radius"]), k) for _, row in df.iterrows() for k in numbers
            if not row[k.replace("certificate_", "from_range_")]}


def test_another_radius_dual_fails_dual_pd_or_sum(bert_files, tmp_path):
    """The duals are per radius (of +H0 + 2 r P): the first two radii's swapped, every number of that sense at both
    radii fails (the smaller radius's dual does not prove diag(y) - (H0 + 2 r P) positive definite at the larger
    radius; the larger's does at the smaller one, but its bound is above the number the smaller's gave)."""
    cert = dict(bert_files[3])
    y = cert["y_pos"].copy()
    y[[0, 1]] = y[[1, 0]]
    cert["y_pos"] = y
    fails = _by(_audit(_write(tmp_path, bert_files, certificate=cert)), "fail")
    expected = {u for u in _taylor(bert_files[2], ("certificate_f", "certificate_g")) if u[1] in RADII[:2]}
    assert len(expected) == 8 and {(str(r["head"]), float(r["radius"]), r["number"]) for r in fails} == expected
    assert {r["check"] for r in fails} <= {"dual_pd", "sum"}


def test_a_scaled_down_dual_fails_dual_pd(gpt2_files, tmp_path):
    """Every dual of the negative sense times 0.9: no Taylor-model number of that sense is proved any more (the
    ones the output LayerNorm's range decides need no dual)."""
    cert = {**gpt2_files[3], "y_neg": 0.9 * gpt2_files[3]["y_neg"]}
    recs = _audit(_write(tmp_path, gpt2_files, certificate=cert))
    fails = _by(recs, "fail")
    expected = _taylor(gpt2_files[2], ("certificate_f_neg", "certificate_g_neg"))
    assert expected and {(str(r["head"]), float(r["radius"]), r["number"]) for r in fails} == expected
    assert {r["check"] for r in fails} == {"dual_pd"} and len(fails) == len(expected)


def test_a_nan_in_a_dual_fails_pieces(bert_files, tmp_path):
    cert = dict(bert_files[3])
    y = cert["y_pos"].copy()
    y[1, 0, 0] = np.nan                       # the second radius, head 0, one entry
    cert["y_pos"] = y
    fails = _by(_audit(_write(tmp_path, bert_files, certificate=cert)), "fail")
    assert {(r["check"], str(r["head"]), float(r["radius"]), r["number"]) for r in fails} == {
        ("pieces", "0", RADII[1], "certificate_f"), ("pieces", "0", RADII[1], "certificate_g")}


def test_a_certificate_file_of_the_old_format_fails_pieces(gpt2_files, tmp_path):
    """The integral-remainder certificate's file (one dual (heads, d) per sense for all radii, the remainder's
    duals, its pieces and kappa) proves nothing the audit re-derives now: every Taylor-model number fails `pieces`
    (the output LayerNorm's range caps need no dual and pass)."""
    cert = gpt2_files[3]
    old = {**{k: v for k, v in cert.items() if k not in ("y_pos", "y_neg")}, "y_pos": cert["y_pos"][-1],
           "y_neg": cert["y_neg"][-1], "y_rem": cert["y_pos"], "pieces": np.array(4), "kappa": np.array(1.0)}
    recs = _audit(_write(tmp_path, gpt2_files, certificate=old))
    assert len(recs) == 4 * len(gpt2_files[2])
    taylor = _taylor(gpt2_files[2], ("certificate_f", "certificate_g", "certificate_f_neg", "certificate_g_neg"))
    assert {(str(r["head"]), float(r["radius"]), r["number"]) for r in _by(recs, "fail", "pieces")} == taylor
    assert {r["check"] for r in _by(recs, "pass")} == {"weights+layer_norm_range"}


@pytest.mark.parametrize("number", ["certificate_f", "certificate_g", "certificate_f_neg", "certificate_g_neg"])
def test_a_number_lowered_by_one_percent_fails_sum(number, bert_files, tmp_path):
    """Lowered by 1 % of itself in both certificate columns, the table re-signed (its sidecar rewritten)."""
    df = bert_files[2].copy()
    i = _second_order_row(df, number)
    for col in (number, f"second_order_{number}"):
        df.loc[i, col] = df.loc[i, col] - 0.01 * abs(df.loc[i, col])
    fails = _by(_audit(_write(tmp_path, bert_files, df=df)), "fail")
    assert [(r["row"], r["number"], r["check"]) for r in fails] == [(i, number, "sum")]


def test_a_negative_dual_fails_pieces(gpt2_files, tmp_path):
    cert = dict(gpt2_files[3])
    y = cert["y_neg"].copy()
    y[0, 0, 3] = -1e-3                        # the first radius, head 0, one entry
    cert["y_neg"] = y
    fails = _by(_audit(_write(tmp_path, gpt2_files, certificate=cert)), "fail")
    assert {(r["check"], str(r["head"]), float(r["radius"]), r["number"]) for r in fails} == {
        ("pieces", "0", RADII[0], "certificate_f_neg"), ("pieces", "0", RADII[0], "certificate_g_neg")}


def test_a_reported_number_that_is_not_its_bound_fails_reported(gpt2_files, tmp_path):
    df = gpt2_files[2].copy()
    i = _second_order_row(df, "certificate_g")
    df.loc[i, "certificate_g"] = df.loc[i, "certificate_g"] - 1e-3
    fails = _by(_audit(_write(tmp_path, gpt2_files, df=df)), "fail")
    assert [(r["row"], r["number"], r["check"]) for r in fails] == [(i, "certificate_g", "reported")]


def test_an_edited_weight_is_re_derived_and_fails(gpt2_files, tmp_path):
    """A forger who scales the MLP and rewrites the sidecar changes the block map: its re-derived bound is above
    the reported one. Without the sidecar rewritten the file itself is refused."""
    name, layers, _, _ = gpt2_files
    edited = {**layers, 1: {**layers[1], "mlp_W_1": layers[1]["mlp_W_1"] * 3.0}}
    fails = _by(_audit(_write(tmp_path / "a", (name, edited, *gpt2_files[2:]))), "fail")
    assert fails and {r["check"] for r in fails} <= {"sum", "dual_pd"}
    root = _write(tmp_path / "b", gpt2_files)
    path = root[0] / "extract" / name / "layer2.npz"
    np.savez_compressed(path, **{**layers[2], "ln_gain": layers[2]["ln_gain"] * 2.0})
    recs = _audit(root)
    assert not _by(recs, "pass") and {r["check"] for r in _by(recs, "fail")} == {"weights"}


def test_another_specification_seed_fails(gpt2_files, tmp_path):
    recs = _audit(_write(tmp_path, gpt2_files), BlockAuditConfig(PROMPT, POSITION, SPEC_SEED + 1))
    # the rows of another seed: every Taylor-model number fails; a number may still pass as a true bound of the other
    # rows' g through the output LayerNorm's range, never through the duals
    assert _by(recs, "fail") and {r["check"] for r in _by(recs, "pass")} <= {"weights+layer_norm_range"}


def test_without_a_configuration_the_table_fails(gpt2_files, tmp_path):
    recs = _audit(_write(tmp_path, gpt2_files), None)
    assert not _by(recs, "pass") and _by(recs, "fail", "config")


def test_a_number_lowered_in_both_columns_fails_sum_whatever_else_the_row_says(gpt2_files, tmp_path):
    """A forger who lowers a number in both certificate columns and adds a label calling it CROWN's is caught:
    the audit compares with the bound the weights give, not with what the row says of itself; the same for g
    lowered below g(0)."""
    df = gpt2_files[2].copy()
    i = _second_order_row(df)
    df["certificate_source"] = "crown"
    for col in ("certificate_f", "second_order_certificate_f"):
        df.loc[i, col] = 0.1 * df.loc[i, col]
    for col in ("certificate_g", "second_order_certificate_g"):
        df.loc[i, col] = df.loc[i, "g0"] - 1e-3
    fails = _by(_audit(_write(tmp_path, gpt2_files, df=df)), "fail")
    assert {(r["row"], r["number"], r["check"]) for r in fails} == {(i, "certificate_f", "sum"),
                                                                    (i, "certificate_g", "sum")}


def test_a_finite_certificate_reported_as_infinite_fails(gpt2_files, tmp_path):
    df = gpt2_files[2].copy()
    i = _second_order_row(df)
    for col in ("certificate_f", "second_order_certificate_f"):
        df.loc[i, col] = np.inf
    fails = _by(_audit(_write(tmp_path, gpt2_files, df=df)), "fail")
    assert [(r["row"], r["number"], r["check"]) for r in fails] == [(i, "certificate_f", "reported")]


def test_repeated_deleted_and_foreign_units_fail_completeness(gpt2_files, tmp_path):
    df = gpt2_files[2]
    repeated = __import__("pandas").concat([df, df.iloc[[0]]], ignore_index=True)
    fails = _by(_audit(_write(tmp_path / "a", gpt2_files, df=repeated)), "fail")
    assert [(r["check"], r["reason"]) for r in fails] == [("completeness", "unit repeated")]
    dropped = df[df["head"] != 1].reset_index(drop=True)
    fails = _by(_audit(_write(tmp_path / "b", gpt2_files, df=dropped)), "fail")
    assert len(fails) == len(RADII) and {r["reason"] for r in fails} == {
        "unit of the configuration missing from the table"}
    foreign = df.copy()
    foreign.loc[0, "radius"] = 0.5
    fails = _by(_audit(_write(tmp_path / "c", gpt2_files, df=foreign)), "fail")
    assert {r["check"] for r in fails} >= {"completeness"}
    assert "row not in the configuration's grid" in {r["reason"] for r in fails}
    # a whole transition deleted: every one of its units is missing
    recs = _audit(_write(tmp_path / "d", gpt2_files, df=df.iloc[:0]))
    assert len(_by(recs, "fail", "completeness")) == 2 * len(RADII) and not _by(recs, "pass")


def test_a_missing_table_or_column_fails(gpt2_files, tmp_path):
    root = _write(tmp_path / "a", gpt2_files)
    (root[0] / "block" / root[1] / "units.csv").unlink()
    recs = _audit(root)
    assert [r["check"] for r in recs] == ["completeness"] and recs[0]["status"] == "fail"
    for col in ("certificate_g_neg", "second_order_certificate_f", "transition"):
        recs = _audit(_write(tmp_path / col, gpt2_files, df=gpt2_files[2].drop(columns=[col])))
        assert [(r["status"], r["check"]) for r in recs] == [("fail", "columns")] and col in recs[0]["reason"]


def test_an_unreadable_cell_or_a_truncated_certificate_file_fails_without_a_traceback(gpt2_files, tmp_path):
    df = gpt2_files[2].copy().astype({"transition": object})
    df.loc[0, "transition"] = "x"
    recs = _audit(_write(tmp_path / "a", gpt2_files, df=df))
    assert ("unit", 0) in {(r["check"], r["row"]) for r in _by(recs, "fail")}
    root = _write(tmp_path / "b", gpt2_files)
    path = root[0] / "block" / root[1] / "transition1_certificates.npz"
    path.write_bytes(path.read_bytes()[:200])
    write_sidecar(path, {"stage": "test", "model": {"name": root[1]}})      # re-signed: the checksum matches
    recs = _audit(root)
    assert not _by(recs, "pass") and {r["check"] for r in _by(recs, "fail")} == {"certificate_file"}


def test_a_missing_certificate_file_fails(gpt2_files, tmp_path):
    root = _write(tmp_path, gpt2_files)
    (root[0] / "block" / root[1] / "transition1_certificates.npz").unlink()
    recs = _audit(root)
    assert _by(recs, "fail", "certificate_file") and not _by(recs, "pass")


def test_an_edited_certificate_file_without_its_sidecar_fails_certificate_file(gpt2_files, tmp_path):
    root = _write(tmp_path, gpt2_files)
    path = root[0] / "block" / root[1] / "transition1_certificates.npz"
    np.savez_compressed(path, **{**gpt2_files[3], "y_pos": gpt2_files[3]["y_pos"] * 2.0})
    recs = _audit(root)
    assert not _by(recs, "pass") and {r["check"] for r in _by(recs, "fail")} == {"certificate_file"}
    assert all("corrupted" in r["reason"] for r in _by(recs, "fail"))


def test_the_audit_summary_lists_the_block_numbers_in_one_order_whatever_the_record_order():
    """The summary table's rows do not depend on the order of the records (or on set iteration order): two runs
    with the same outcomes write the same audit.md, timing aside."""
    import random

    from attncert.audit.audit_table import summary_markdown

    numbers = ("certificate_f", "certificate_f_neg", "certificate_g", "certificate_g_neg", "second_order_upper")
    records = [dict(table="block", layer=1, row=i, number=k, status="pass", check="sdp_dual", reason="")
               for i in range(3) for k in numbers]
    first = summary_markdown(records, "m", 1.0, [1])
    for seed in range(5):
        random.Random(seed).shuffle(records)
        assert summary_markdown(records, "m", 1.0, [1]) == first
    rows = [line.split(" | ")[1] for line in first.splitlines() if line.startswith("| block |")]
    assert rows == sorted(rows)


def test_a_failed_audit_names_the_command_that_regenerates_each_failing_output():
    """The summary's last word on a failure is what to run: the damaged output as target before `--forcerun` (which
    reads every later word as a rule), one line per output, none when nothing failed."""
    from attncert.audit.audit_table import summary_markdown

    def rec(table, layer="", status="fail"):
        return {"table": table, "layer": layer, "row": 0, "number": "first_order", "status": status,
                "check": "c", "reason": "r", "margin": -1.0}

    fails = [rec("certify", 3), rec("certify", 3), rec("block", 1), rec("weights", 2), rec("certification.md"),
             rec("minip_sweep.csv"), rec("README.md"), rec("long_context tables")]
    text = summary_markdown(fails, "m", 1.0, [3])
    step = text.split("Next step:")[1]
    for line in ("- `snakemake --cores all data/certify/m/layer3.csv --forcerun certify_layer`",
                 "- `snakemake --cores all data/block/m/units.csv --forcerun block_transition`",
                 "- `snakemake --cores all data/extract/m/layer2.npz --forcerun extract`",
                 "- `snakemake --cores all --force figures/tables/m/certification.md`",
                 "- `snakemake --cores all --force figures/tables/minip/{grid}/minip_sweep.csv`",
                 "- `snakemake --cores all --forcerun long_context_certify`",
                 "figures/tables/m/paper_vs_reproduced.json"):
        assert line in step, step
    assert step.count("data/certify/m/layer3.csv") == 1
    assert "Next step" not in summary_markdown([rec("certify", 3, "pass")], "m", 1.0, [3])


@pytest.mark.parametrize("forgery", ["missing", "nan", "shape"])
def test_a_missing_or_malformed_softmax_shift_fails_pieces(forgery, gpt2_files, tmp_path):
    cert = dict(gpt2_files[3])
    shift = cert.pop("softmax_shift")
    if forgery == "nan":
        shift = shift.copy()
        shift[0, 0] = np.nan
        cert["softmax_shift"] = shift
    elif forgery == "shape":
        cert["softmax_shift"] = shift[:, :-1]
    recs = _audit(_write(tmp_path, gpt2_files, certificate=cert))
    assert len(recs) == 4 * len(gpt2_files[2]) and {(r["status"], r["check"]) for r in recs} == {("fail", "pieces")}


def test_a_forged_softmax_shift_is_re_derived_not_trusted(bert_files, tmp_path):
    """The shift is a free parameter of the decomposition: the audit rebuilds the bound with the file's shift, so a
    wild one (the stored duals no longer fit, the rest grows) fails every Taylor-model number."""
    cert = {**bert_files[3], "softmax_shift": 1e3 * (bert_files[3]["softmax_shift"] + 1.0)}
    recs = _audit(_write(tmp_path, bert_files, certificate=cert))
    fails = _by(recs, "fail")
    expected = _taylor(bert_files[2], ("certificate_f", "certificate_g", "certificate_f_neg", "certificate_g_neg"))
    assert expected and {(str(r["head"]), float(r["radius"]), r["number"]) for r in fails} == expected
    assert {r["check"] for r in fails} <= {"dual_pd", "sum"}


def test_a_range_capped_number_needs_no_dual_but_fails_below_the_cap(gpt2_files, tmp_path):
    """A number the output LayerNorm's range decides passes with every dual zeroed (the cap is re-derived from the
    weights, the rows, g0 and G alone); lowered by 1e-6 of itself it is no longer the cap, and the Taylor model's
    bound (+inf or above the cap there) does not prove it: `sum` or `dual_pd`."""
    df = gpt2_files[2].copy()
    i = int(np.flatnonzero(df["from_range_f"].to_numpy(bool))[0])
    cert = {**gpt2_files[3], "y_pos": np.zeros_like(gpt2_files[3]["y_pos"])}
    recs = _audit(_write(tmp_path / "a", gpt2_files, certificate=cert))
    assert [r["check"] for r in recs if r["row"] == i and r["number"] == "certificate_f"] == \
        ["weights+layer_norm_range"]
    for col in ("certificate_f", "second_order_certificate_f"):
        df.loc[i, col] = df.loc[i, col] * (1 - 1e-6)
    fails = _by(_audit(_write(tmp_path / "b", gpt2_files, df=df)), "fail")
    assert [(r["row"], r["number"]) for r in fails] == [(i, "certificate_f")]
    assert fails[0]["check"] in ("sum", "dual_pd")


def test_a_forged_gradient_moves_the_range_cap_of_f_not_g(gpt2_files, tmp_path):
    """G is a free parameter of f = g - g0 - G . delta: the cap of f holds r ||G||_1, so a file whose G is doubled
    makes every range-capped number of f fall below the cap re-derived with that G (the cap of g does not move)."""
    cert = {**gpt2_files[3], "G": 2.0 * gpt2_files[3]["G"]}
    recs = _audit(_write(tmp_path, gpt2_files, certificate=cert))
    df = gpt2_files[2]

    def capped(k):
        return {(str(row["head"]), float(row["radius"])) for _, row in df.iterrows() if row[f"from_range_{k}"]}

    def checks(k, units):
        return {r["check"] for r in recs if r["number"] == f"certificate_{k}"
                and (str(r["head"]), float(r["radius"])) in units}

    assert capped("f") and capped("g")
    assert checks("g", capped("g")) == {"weights+layer_norm_range"}
    assert "weights+layer_norm_range" not in checks("f", capped("f"))
    assert {r["status"] for r in recs if r["number"] == "certificate_f"
            and (str(r["head"]), float(r["radius"])) in capped("f")} == {"fail"}


@pytest.mark.parametrize("forgery", ["missing", "negative", "nan_t", "nan_v", "shape"])
def test_a_missing_or_malformed_rank_one_term_fails_pieces(forgery, bert_files, tmp_path):
    """The rank-one term (t (R, m) >= 0 along v (m, d)) of every dual is read as a free parameter: missing, negative,
    NaN or misshapen, every Taylor-model number of that sense fails `pieces` (the range caps need none)."""
    cert = dict(bert_files[3])
    t, v = cert["t_pos"].copy(), cert["v_pos"].copy()
    if forgery == "missing":
        del cert["t_pos"], cert["v_pos"]
    elif forgery == "negative":
        t[:] = -1e-9
    elif forgery == "nan_t":
        t[:, 0] = np.nan
    elif forgery == "nan_v":
        v[:, 0] = np.nan
    else:
        v = v[:, :-1]
    if forgery != "missing":
        cert["t_pos"], cert["v_pos"] = t, v
    fails = _by(_audit(_write(tmp_path, bert_files, certificate=cert)), "fail")
    expected = _taylor(bert_files[2], ("certificate_f", "certificate_g"))
    if forgery == "nan_t":         # head 0's weights only
        expected = {u for u in expected if u[0] == "0"}
    if forgery == "missing":       # without t_pos the file lacks an array: every number fails, the caps too
        assert {r["check"] for r in fails} == {"pieces"} and len(fails) == 4 * len(bert_files[2])
        return
    assert expected and {(str(r["head"]), float(r["radius"]), r["number"]) for r in fails} == expected
    assert {r["check"] for r in fails} == {"pieces"}


@pytest.mark.parametrize("forgery", ["t_zero", "t_half", "v_other"])
def test_a_forged_rank_one_term_fails_dual_pd_or_sum(forgery, gpt2_files_subgradient, tmp_path):
    """diag(y) + t v v^T - M is re-checked with the file's t and v: a dual whose rank-one term is dropped, halved or
    turned to another direction no longer proves positive definiteness where the term carried weight (or, where it
    still does, its bound is not the reported one); nothing passes that the true pieces do not prove. (Duals with
    t > 0: the subgradient duals; the stage's mixing-method duals have t = 0, a file may still carry any t.)"""
    gpt2_files = gpt2_files_subgradient
    cert = dict(gpt2_files[3])
    t, v = cert["t_neg"].copy(), cert["v_neg"].copy()
    if forgery == "t_zero":
        t[:] = 0.0
    elif forgery == "t_half":
        t = 0.5 * t
    else:
        v = np.roll(v, 1, axis=-1)
    cert["t_neg"], cert["v_neg"] = t, v
    recs = _audit(_write(tmp_path, gpt2_files, certificate=cert))
    weighted = {(str(h), float(r)) for ri, r in enumerate(RADII) for h, tt in zip((0, 1), gpt2_files[3]["t_neg"][ri])
                if tt > 0}
    taylor = _taylor(gpt2_files[2], ("certificate_f_neg", "certificate_g_neg"))
    expected = {u for u in taylor if (u[0], u[1]) in weighted}
    fails = _by(recs, "fail")
    assert expected and expected <= {(str(r["head"]), float(r["radius"]), r["number"]) for r in fails}
    assert {r["check"] for r in fails} <= {"dual_pd", "sum"}


def test_the_audit_forms_the_same_rows_hessians_as_the_stage_at_every_width():
    """The formed centre Hessians are limited by width (d > 512: only single rows); the audit's own rule must pick
    the same rows as the stage's, or a wide model's certificate would fail `sum` (the audit looser) or pass on
    pieces the stage did not use."""
    from attncert.audit import block_taylor_model as audit_tm
    from attncert.block.taylor_model import hessian_row_limit

    for d in (16, 384, 512, 513, 768, 1024):
        audit = audit_tm.HESSIAN_ROWS if d <= 512 else audit_tm.HESSIAN_ROWS_WIDE
        assert audit == hessian_row_limit(d)


def test_the_table_piece_and_each_transition_piece_joined_are_the_whole_audit(gpt2_files, tmp_path):
    """The pipeline audits the block table in pieces (the table's own checks with the rows of transitions the
    configuration does not name, then each configured transition): joined, they are the records of one audit,
    record for record, for a sound table and for one with a repeated unit and a foreign transition's row."""
    from attncert.audit.certificate_pieces import certificate_parts

    df = gpt2_files[2]
    foreign = df.iloc[[0]].copy()
    foreign["transition"] = 0
    mixed = __import__("pandas").concat([df, foreign, df.iloc[[1]]], ignore_index=True)
    for name, table in (("sound", df), ("mixed", mixed)):
        root, model = _write(tmp_path / name, gpt2_files, df=table)
        whole = audit_block(root, model, CFG)
        pieces = audit_block(root, model, CFG, "table") + [
            rec for L in CFG.transitions for rec in audit_block(root, model, CFG, L)]
        assert [repr(r) for r in pieces] == [repr(r) for r in whole]
        assert audit_block(root, model, CFG, 7) == []                     # a transition without rows: no record
    assert not [r for r in audit_block(root, model, CFG, "table") if r["status"] == "pass"]
    assert certificate_parts([0], (3, 1)) == ["layer0", "long_context", "block", "block1", "block3"]
