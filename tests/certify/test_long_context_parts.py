"""The long-context experiment as one job per (length group, head): the merge of the parts writes the table and the
certificate file one job certifying every unit writes (rows in the same order, the certificate file byte for byte),
and a missing, altered or foreign part stops the merge with one line naming the command that regenerates it.

A tiny bidirectional model (random weights, d = 6, two heads), lengths 4, 6 and 10 (jobs: 4 and 6 together, 10
alone), both query modes; the workflow's
entry scripts run in-process with a stand-in for Snakemake's object (tests/audit/summary_run.py)."""
import io
import runpy
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attncert.certify.certificate_store import write_certificates
from attncert.certify.long_context import certify_long_context, long_context_problems
from attncert.certify.long_context_jobs import group_label, group_of_label, length_groups, part_keys, part_stem
from attncert.certify.long_context_parts import PartError, merge_parts
from attncert.integrity.intermediate_check import IntermediateError, expect_model_of
from attncert.provenance.provenance import atomic_path, provenance, write_sidecar
from intermediate_files import tiny_layer_arrays

REPO = Path(__file__).resolve().parents[2]
MODEL_CFG = {"name": "m", "family": "bert", "source": "embedded"}
LC = dict(layer=1, heads=[0, 1], lengths=[4, 6, 10], query_position=2, radii=[0.05], norms=["linf"],
          modes=["fixed", "varying"], tight=True)
ASCENT = dict(ascent_restarts=2, ascent_steps=30, seed=0)


class _Named(dict):
    __getattr__ = dict.__getitem__

    def __iter__(self):
        return iter(self.values())


def _script(name, inputs, outputs, params, log):
    """workflow/scripts/`name` as Snakemake runs it (its job log and excepthook left out)."""
    import attncert.provenance.job_log as job_log

    start = job_log.start_job_log
    job_log.start_job_log = lambda path: None
    try:
        sm = type("Snakemake", (), {"input": _Named(inputs), "output": _Named(outputs), "threads": 1,
                                    "params": _Named({"model": MODEL_CFG, "code": "t", **params}), "log": [str(log)]})
        runpy.run_path(str(REPO / "workflow" / "scripts" / name), init_globals={"snakemake": sm})
    finally:
        job_log.start_job_log = start
        expect_model_of({})


def _token_arrays() -> dict:
    a = tiny_layer_arrays(H=2, d=6, dh=3)
    out = {k: a[k] for k in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O")}
    out["causal"] = np.bool_(False)
    Z = np.random.default_rng(3).standard_normal((max(LC["lengths"]), 6))
    for T in LC["lengths"]:
        out[f"Z_{T}"] = Z[None, :T]
    return out


def _certify_params(group, h):
    return dict(layer=LC["layer"], lengths=list(group), head=h, query_position=LC["query_position"], radii=LC["radii"],
                norms=LC["norms"], modes=LC["modes"], tight=True, spec_seed=0, **ASCENT)


def _merge_io(base):
    keys = part_keys(LC["lengths"], LC["heads"])
    inputs = {"tables": [str(base / "parts" / f"{part_stem(g, h)}.csv") for g, h in keys],
              "certificates": [str(base / "parts" / f"{part_stem(g, h)}_certificates.npz") for g, h in keys]}
    outputs = {"csv": str(base / "units.csv"), "certificates": str(base / "units_certificates.npz")}
    params = dict(lengths=LC["lengths"], heads=LC["heads"], radii=LC["radii"], norms=LC["norms"], modes=LC["modes"])
    return inputs, outputs, params


def _merge(base, log):
    _script("long_context_merge.py", *_merge_io(base), log)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run folder: the token file, every part written by the long_context_certify script, and the single job's
    table and certificate file for comparison (certified in-process on all units at once)."""
    root = tmp_path_factory.mktemp("lc_parts")
    base = root / "data" / "long_context" / "m"
    base.mkdir(parents=True)
    arrays = _token_arrays()
    tokens = base / "layer_tokens.npz"
    with atomic_path(tokens) as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    write_sidecar(tokens, provenance({"code": "t", "model": MODEL_CFG}, stage="long_context_extract"))
    for g, h in part_keys(LC["lengths"], LC["heads"]):
        stem = base / "parts" / part_stem(g, h)
        _script("long_context_certify.py", {"npz": str(tokens)},
                {"csv": f"{stem}.csv", "certificates": f"{stem}_certificates.npz"}, _certify_params(g, h),
                root / "log.txt")
    problems = long_context_problems(arrays, LC["layer"], LC["lengths"], LC["heads"], LC["query_position"],
                                     LC["radii"], LC["norms"], 0, LC["modes"])
    single, entries, pool = certify_long_context(problems, tight=True, **ASCENT)
    write_certificates(root / "single_certificates.npz", entries, pool)
    return root, base, single


def test_the_merge_writes_what_one_job_writes(run, tmp_path):
    root, base, single = run
    _merge(base, tmp_path / "log.txt")
    merged = pd.read_csv(base / "units.csv")
    one_job = pd.read_csv(io.StringIO(single.to_csv(index=False, float_format="%.17g")))  # as that job writes it
    assert list(merged.columns) == list(one_job.columns) and len(merged) == len(one_job) == 3 * 2 * 2
    timing = [c for c in one_job.columns if c.startswith("t_")]  # seconds: never equal between two runs
    pd.testing.assert_frame_equal(merged.drop(columns=timing), one_job.drop(columns=timing), check_exact=True)
    assert (base / "units_certificates.npz").read_bytes() == (root / "single_certificates.npz").read_bytes()
    assert (base / "units.csv.json").is_file() and (base / "units_certificates.npz.json").is_file()


@pytest.mark.parametrize("damage", ["missing", "altered"])
def test_a_missing_or_altered_part_stops_the_merge_with_one_line(run, tmp_path, damage):
    import shutil

    root, base, _ = run
    copy = tmp_path / "data" / "long_context" / "m"
    shutil.copytree(base / "parts", copy / "parts")
    shutil.copy(base / "layer_tokens.npz", copy / "layer_tokens.npz")
    part = copy / "parts" / f"{part_stem((10,), 1)}_certificates.npz"
    if damage == "missing":
        part.unlink()
    else:
        part.write_bytes(part.read_bytes()[:-100])
    with pytest.raises(IntermediateError) as e:
        _merge(copy, tmp_path / "log.txt")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(part))
    assert msg.endswith("regenerate it with: snakemake --cores all "
                        "data/long_context/m/parts/lengths10_head1_certificates.npz --forcerun long_context_certify")
    assert not (copy / "units.csv").exists()


def test_a_part_of_another_head_is_refused_with_one_line(run, tmp_path, capsys):
    import shutil

    root, base, _ = run
    copy = tmp_path / "data" / "long_context" / "m"
    shutil.copytree(base / "parts", copy / "parts")
    stray = copy / "parts" / f"{part_stem((4, 6), 1)}.csv"
    shutil.copy(copy / "parts" / f"{part_stem((4, 6), 0)}.csv", stray)  # head 0's rows under head 1's name, re-signed
    write_sidecar(stray, provenance({"code": "t", "model": MODEL_CFG}, stage="long_context_certify"))
    with pytest.raises(SystemExit):
        _merge(copy, tmp_path / "log.txt")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("attncert:")]
    assert len(lines) == 1 and "holds a row of length 4, head 0, but the part of lengths 4, 6, head 1" in lines[0]
    assert "fix: regenerate it with: snakemake --cores all data/long_context/m/parts/lengths4-6_head1.csv " \
           "--forcerun long_context_certify" in lines[0]
    assert not (copy / "units.csv").exists()


def test_parts_in_another_number_than_the_grid_are_refused(run, tmp_path):
    root, base, _ = run
    inputs, outputs, params = _merge_io(base)
    with pytest.raises(PartError, match="3 tables and 4 certificate files for 4 parts"):
        merge_parts(inputs["tables"][:3], inputs["certificates"], LC["lengths"], LC["heads"], 2,
                    tmp_path / "u.csv", tmp_path / "u.npz")


def test_rows_equal_each_unit_certified_alone(monkeypatch):
    """The varying-query units of one length and head have their ascents batched over the radii, warm-started from
    the fixed-query units' exact solves: every row is the one `certify_unit` gives the unit alone (timing aside)."""
    import attncert.certify.run as run_module
    from attncert.certify.run import certify_unit
    from attncert.certify.unit_columns import LONG_CONTEXT_COLUMNS

    arrays = _token_arrays()
    problems = long_context_problems(arrays, LC["layer"], [10], [1], LC["query_position"], [0.02, 0.05],
                                     LC["norms"], 0, LC["modes"])
    batches, real = [], run_module.best_feasible_ascents
    monkeypatch.setattr(run_module, "best_feasible_ascents", lambda ps, **kw: batches.append(len(ps)) or real(ps, **kw))
    table, _, _ = certify_long_context(problems, tight=True, **ASCENT)
    assert batches == [2]  # one batch: both radii of the varying query
    monkeypatch.undo()
    alone = pd.DataFrame([certify_unit(p, tight=True, ascent_check_fraction=0.0, **ASCENT) for p in problems],
                         columns=LONG_CONTEXT_COLUMNS)
    keep = [c for c in LONG_CONTEXT_COLUMNS if not c.startswith("t_")]
    pd.testing.assert_frame_equal(table[keep], alone[keep], check_exact=True)
    assert list(table["best_feasible_from"]) == ["exact_witness"] * 2 + ["ascent_warm"] * 2


def test_a_part_with_its_rows_out_of_order_is_refused(run, tmp_path):
    root, base, _ = run
    inputs, _, _ = _merge_io(base)
    table = pd.read_csv(inputs["tables"][0])  # lengths 4 and 6 of head 0
    shuffled = tmp_path / "part.csv"
    table.iloc[::-1].to_csv(shuffled, index=False)
    with pytest.raises(PartError, match="its rows out of order"):
        merge_parts([str(shuffled)] + inputs["tables"][1:], inputs["certificates"], LC["lengths"], LC["heads"], 2,
                    tmp_path / "u.csv", tmp_path / "u.npz")


@pytest.mark.parametrize("lengths, groups", [
    ([16, 64, 128, 256, 512], [(16, 64, 128, 256), (512,)]),   # the default configuration
    ([16, 64, 256, 1024], [(16, 64, 256), (1024,)]),           # the paper configuration
    ([8], [(8,)]),
    ([8, 8], [(8,), (8,)]),
    ([512, 16], [(512,), (16,)]),                               # configured order kept
    ([4, 6, 10], [(4, 6), (10,)]),
    ([], []),
])
def test_length_groups_pack_the_short_lengths_up_to_the_longest(lengths, groups):
    assert length_groups(lengths) == groups
    assert [T for g in groups for T in g] == lengths  # every length once, in order
    assert all(sum(g) <= max(lengths) for g in groups)
    assert all(group_of_label(group_label(g)) == g for g in groups)


def test_part_keys_follow_the_table_order():
    """By head, then length: the order of `long_context_problems`, so the parts concatenate into the table."""
    assert part_keys([4, 6, 10], [0, 1]) == [((4, 6), 0), ((10,), 0), ((4, 6), 1), ((10,), 1)]
    problems = long_context_problems(_token_arrays(), LC["layer"], LC["lengths"], LC["heads"], LC["query_position"],
                                     LC["radii"], LC["norms"], 0, LC["modes"])
    order = [(p.meta["head"], p.meta["length"]) for p in problems]
    assert order == sorted(order, key=lambda x: (LC["heads"].index(x[0]), LC["lengths"].index(x[1])))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
