"""The audit of the block certificates (audit/block_audit.py) on tiny GPT-2 and BERT blocks written as the stage writes
them (extraction files, the block table, the stored duals): every second-order row passes, and each forgery fails
the right check: a lowered number or one without its remainder (`sum`), an edited dual (`dual_pd`), a reported
number that is not its bound (`reported`), an edited weight with its sidecar rewritten (`sum`), an edited weight
without it (`weights`), another configuration's specification seed; without a configuration nothing is passed."""
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
CFG = BlockAuditConfig(PROMPT, POSITION, SPEC_SEED)


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


def _second_order_row(df, column="certificate_source"):
    return int(np.flatnonzero(df[column] == "second_order")[0])


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_every_second_order_row_passes_and_crown_rows_are_not_covered(family, request, tmp_path):
    files = request.getfixturevalue(f"{family}_files")
    df = files[2]
    recs = _audit(_write(tmp_path, files))
    assert len(recs) == 4 * len(df)
    sources = ("certificate_source", "certificate_g_source", "certificate_f_neg_source", "certificate_g_neg_source")
    n_second = sum(int((df[c] == "second_order").sum()) for c in sources)
    n_crown = sum(int((df[c] == "crown").sum()) for c in sources)
    assert len(_by(recs, "pass")) == n_second > 0
    assert len(_by(recs, "not covered", "no_certificate")) == n_crown > 0      # larger radii: CROWN's bound
    assert len(_by(recs, "not applicable", "infinite")) == 4 * len(df) - n_second - n_crown   # +inf: neither finite
    assert not _by(recs, "fail")


def test_a_lowered_number_fails_sum(gpt2_files, tmp_path):
    df = gpt2_files[2].copy()
    i = _second_order_row(df)
    for col in ("certificate_f", "second_order_certificate_f"):
        df.loc[i, col] = df.loc[i, col] * (1 - 1e-4)   # the audit re-derives it to within about 5e-6
    fails = _by(_audit(_write(tmp_path, gpt2_files, df=df)), "fail")
    assert [(r["row"], r["number"], r["check"]) for r in fails] == [(i, "certificate_f", "sum")]


def test_a_number_without_its_remainder_fails_sum(bert_files, tmp_path):
    """The remainder is what makes the bound hold over the whole box: a table that drops it is caught."""
    df = bert_files[2].copy()
    i = _second_order_row(df)
    dropped = df.loc[i, "certificate_f"] - 0.5 * df.loc[i, "certificate_remainder"]
    assert df.loc[i, "certificate_remainder"] > 0 and dropped > 0
    for col in ("certificate_f", "second_order_certificate_f"):
        df.loc[i, col] = dropped
    fails = _by(_audit(_write(tmp_path, bert_files, df=df)), "fail")
    assert [(r["row"], r["number"], r["check"]) for r in fails] == [(i, "certificate_f", "sum")]


def test_an_edited_dual_fails_dual_pd(gpt2_files, tmp_path):
    cert = dict(gpt2_files[3])
    y = cert["y_pos"].copy()
    y[1] = 0.5 * y[1]                         # head 1's dual halved: diag(y) - H0 no longer positive definite
    cert["y_pos"] = y
    fails = _by(_audit(_write(tmp_path, gpt2_files, certificate=cert)), "fail")
    assert fails and {r["check"] for r in fails} == {"dual_pd"}
    assert {str(r["head"]) for r in fails} == {"1"} and {r["number"] for r in fails} == {"certificate_f",
                                                                                         "certificate_g"}


def test_an_edited_remainder_dual_fails_sum(bert_files, tmp_path):
    """The remainder's joint form is certified by its own dual (one per radius): lowered, the form is not proved,
    only the node-by-node remainder counts, and the reported numbers of that radius fail `sum` (f and g of both
    senses share the remainder)."""
    cert = dict(bert_files[3])
    y = cert["y_rem"].copy()
    y[0, 1] = 0.25 * y[0, 1]                  # the first radius, head 1
    cert["y_rem"] = y
    fails = _by(_audit(_write(tmp_path, bert_files, certificate=cert)), "fail")
    assert fails and {r["check"] for r in fails} == {"sum"} and all("joint form" in r["reason"] for r in fails)
    assert {(str(r["head"]), float(r["radius"])) for r in fails} == {("1", RADII[0])} and len(fails) == 4


def test_a_negative_dual_fails_pieces(gpt2_files, tmp_path):
    cert = dict(gpt2_files[3])
    y = cert["y_neg"].copy()
    y[0, 0] = -1.0
    cert["y_neg"] = y
    fails = _by(_audit(_write(tmp_path, gpt2_files, certificate=cert)), "fail")
    assert fails and {r["check"] for r in fails} == {"pieces"} and {str(r["head"]) for r in fails} == {"0"}


def test_a_reported_number_that_is_not_its_bound_fails_reported(gpt2_files, tmp_path):
    df = gpt2_files[2].copy()
    i = _second_order_row(df, "certificate_g_source")
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
    assert _by(recs, "fail") and not _by(recs, "pass")


def test_without_a_configuration_nothing_passes(gpt2_files, tmp_path):
    recs = _audit(_write(tmp_path, gpt2_files), None)
    assert not _by(recs, "pass") and not _by(recs, "fail") and _by(recs, "not covered", "config")


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
