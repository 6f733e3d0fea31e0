"""The audit of the block certificates (audit/block_audit.py) on a tiny GPT-2 block written as the stage writes it:
every second-order row passes; a lowered number fails `sum`, an edited dual fails `dual_pd`, a reported number
that is not its bound fails `reported`; CROWN-sourced rows are not covered."""
import numpy as np
import pytest
import torch

from attncert.audit.block_audit import audit_block
from attncert.block.build import transition_from_model
from attncert.block.certificate import certificate_file_arrays
from attncert.block.residual import analyze_transition, transition_table
from attncert.model.extraction import load_model
from attncert.provenance.provenance import write_sidecar

torch.set_num_threads(1)
MODEL = "tiny-gpt2"
RADII = [1e-3, 1e-2, 1.0]


@pytest.fixture(scope="module")
def stage_files(tiny_gpt2_dir):
    loaded = load_model({"name": MODEL, "family": "gpt2", "source": str(tiny_gpt2_dir)})
    rng = np.random.default_rng(1)
    tr = transition_from_model(loaded.model, "gpt2", 1, rng.standard_normal((6, 16)) * 2.0, position=3)
    C = rng.standard_normal((3, 16))
    C = C / np.linalg.norm(C, axis=1, keepdims=True)
    keep = {}
    rows, timings = analyze_transition(tr, C, RADII, qp_starts=8, ascent_restarts=4, ascent_steps=30, seed=0,
                                       alpha_crown=False, keep=keep)
    df = transition_table(rows, timings, tr, [0, 1, 2], MODEL, 0)
    return df, certificate_file_arrays(keep["certificate"], [0, 1, 2])


def _write(root, df, arrays):
    d = root / "block" / MODEL
    d.mkdir(parents=True, exist_ok=True)
    df.to_csv(d / "units.csv", index=False, float_format="%.17g")
    np.savez_compressed(d / "transition1_certificates.npz", **arrays)
    for f in ("units.csv", "transition1_certificates.npz"):
        write_sidecar(d / f, {"stage": "test", "model": {"name": MODEL}})
    return root


def _by(records, status=None, check=None):
    return [r for r in records if (status is None or r["status"] == status) and (check is None or r["check"] == check)]


def test_every_second_order_row_passes_and_crown_rows_are_not_covered(stage_files, tmp_path):
    df, arrays = stage_files
    recs = audit_block(_write(tmp_path, df, arrays), MODEL)
    assert len(recs) == 4 * len(df)
    sources = ("certificate_source", "certificate_g_source", "certificate_f_neg_source", "certificate_g_neg_source")
    n_second = sum(int((df[c] == "second_order").sum()) for c in sources)
    assert len(_by(recs, "pass")) == n_second > 0
    assert len(_by(recs, "not covered")) == 4 * len(df) - n_second > 0        # the largest radius: CROWN's bound
    assert not _by(recs, "fail")


def test_a_lowered_number_fails_sum(stage_files, tmp_path):
    df, arrays = stage_files
    df = df.copy()
    i = int(np.flatnonzero(df["certificate_source"] == "second_order")[0])
    for col in ("certificate_f", "second_order_certificate_f"):
        df.loc[i, col] = df.loc[i, col] * (1 - 1e-6)
    fails = _by(audit_block(_write(tmp_path, df, arrays), MODEL), "fail")
    assert [(r["row"], r["number"], r["check"]) for r in fails] == [(i, "certificate_f", "sum")]


def test_an_edited_dual_fails_dual_pd(stage_files, tmp_path):
    df, arrays = stage_files
    arrays = dict(arrays)
    y = arrays["y_pos"].copy()
    y[1] = 0.5 * y[1]                         # head 1's dual halved: diag(y) - H0 no longer positive definite
    arrays["y_pos"] = y
    fails = _by(audit_block(_write(tmp_path, df, arrays), MODEL), "fail")
    assert fails and {r["check"] for r in fails} == {"dual_pd"}
    assert {str(r["head"]) for r in fails} == {"1"} and {r["number"] for r in fails} == {"certificate_f",
                                                                                         "certificate_g"}


def test_a_reported_number_that_is_not_its_bound_fails_reported(stage_files, tmp_path):
    df, arrays = stage_files
    df = df.copy()
    i = int(np.flatnonzero(df["certificate_g_source"] == "second_order")[0])
    df.loc[i, "certificate_g"] = df.loc[i, "certificate_g"] - 1e-3
    fails = _by(audit_block(_write(tmp_path, df, arrays), MODEL), "fail")
    assert [(r["row"], r["number"], r["check"]) for r in fails] == [(i, "certificate_g", "reported")]


def test_a_missing_certificate_file_fails(stage_files, tmp_path):
    df, arrays = stage_files
    root = _write(tmp_path, df, arrays)
    (root / "block" / MODEL / "transition1_certificates.npz").unlink()
    recs = audit_block(root, MODEL)
    assert _by(recs, "fail", "certificate_file") and not _by(recs, "pass")


def test_a_negative_remainder_piece_fails_pieces(stage_files, tmp_path):
    df, arrays = stage_files
    arrays = dict(arrays)
    dev = arrays["dev"].copy()
    dev[0, 0, 2] = -1.0                       # head 2: a negative Dev would lower every bound of that head
    arrays["dev"] = dev
    fails = _by(audit_block(_write(tmp_path, df, arrays), MODEL), "fail")
    assert fails and {r["check"] for r in fails} == {"pieces"} and {str(r["head"]) for r in fails} == {"2"}


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
