"""Intermediates check themselves: every sidecar records its file's size and sha256, and the loaders refuse a
missing, truncated or edited intermediate with one line naming the file and the command that regenerates it."""
import hashlib
import json
import re

import numpy as np
import pandas as pd
import pytest

from attncert.head.units import load_specification, load_unit, write_specification
from attncert.model.extraction import load_layer
from attncert.integrity.intermediate_check import (PRODUCED_BY, IntermediateError, producing_rule,
                                                  regenerate_command, verify_intermediate)
from attncert.provenance.provenance import atomic_path, file_checksum, write_sidecar
from attncert.reporting.report_files import load_tables
from conftest import REPO
from intermediate_files import tiny_layer_arrays, write_extracted  # tests/intermediate_files.py

EXTRACT_CMD = "regenerate it with: snakemake --cores all data/extract/m/layer0.npz --forcerun extract"


def _message(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg
    return msg


def _load_message(path) -> str:
    """The one-line message with which loading the extracted layer `path` stops."""
    with pytest.raises(IntermediateError) as e:
        load_layer(path)
    return _message(e)


def test_the_sidecar_records_size_and_sha256_of_the_file_as_written(tmp_path):
    path = write_extracted(tmp_path)
    side = json.loads((tmp_path / "data/extract/m/layer0.npz.json").read_text())
    assert side["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() == file_checksum(path)["sha256"]
    assert side["size_bytes"] == path.stat().st_size and side["stage"] == "extract"


def test_an_intact_file_loads(tmp_path):
    path = write_extracted(tmp_path)
    assert verify_intermediate(str(path)) == path
    got = load_layer(path)
    assert set(got) == set(tiny_layer_arrays()) and np.array_equal(got["W_Q"], tiny_layer_arrays()["W_Q"])


def test_a_truncated_extracted_layer_names_the_file_and_the_command(tmp_path):
    path = write_extracted(tmp_path)
    full = path.stat().st_size
    path.write_bytes(path.read_bytes()[: full // 2])
    assert _load_message(path) == (
        f"{path} is corrupted ({full // 2} bytes, its sidecar layer0.npz.json records {full}): " + EXTRACT_CMD
    )


def test_an_edited_extracted_layer_names_the_file_and_the_command(tmp_path):
    path = write_extracted(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert (
        _load_message(path) == f"{path} is corrupted (sha256 differs from its sidecar layer0.npz.json): " + EXTRACT_CMD
    )


def test_a_missing_file_or_an_unusable_sidecar_each_say_so(tmp_path):
    path = write_extracted(tmp_path)
    side = tmp_path / "data/extract/m/layer0.npz.json"
    record = json.loads(side.read_text())
    side.write_text("{ half a rec")
    assert re.fullmatch(rf"{re.escape(str(path))} cannot be checked \(its sidecar layer0.npz.json is unreadable: "
                        rf".+\): {EXTRACT_CMD}", _load_message(path))
    side.write_text(json.dumps({k: v for k, v in record.items() if k not in ("sha256", "size_bytes")}))
    assert _load_message(path) == (
        f"{path} cannot be checked (its sidecar layer0.npz.json records no sha256 and size): " + EXTRACT_CMD
    )
    side.unlink()
    assert _load_message(path) == f"{path} cannot be checked (its sidecar layer0.npz.json is missing): " + EXTRACT_CMD
    path.unlink()
    assert _load_message(path) == f"{path} is missing: " + EXTRACT_CMD


def test_the_specification_and_the_tables_are_checked_too(tmp_path):
    extracted = write_extracted(tmp_path)
    spec = tmp_path / "data/certify/m/layer0_spec.npz"
    c = np.random.default_rng(1).standard_normal((2, 1, 1, 3))
    write_specification(spec, c, [2], 0, 7)
    got, qps = load_specification(spec)
    assert np.array_equal(got, c) and qps == [2]
    assert load_unit("m", 0, 1, 0, 2, 0.01, root=tmp_path / "data").n == 3
    table = tmp_path / "data/certify/m/layer0.csv"
    with atomic_path(table) as tmp:
        pd.DataFrame({"layer": [0], "upper": [1.5]}).to_csv(tmp, index=False)
    write_sidecar(table, {"stage": "certify"})
    assert load_tables([table]).shape == (1, 2)

    table.write_text(table.read_text().replace("1.5", "2.5"))
    with pytest.raises(IntermediateError) as e:
        load_tables([table])
    assert _message(e) == (f"{table} is corrupted (sha256 differs from its sidecar layer0.csv.json): regenerate it "
                           "with: snakemake --cores all data/certify/m/layer0.csv --forcerun certify_layer")
    spec.write_bytes(spec.read_bytes()[:-10])
    with pytest.raises(IntermediateError, match=r"layer0_spec.npz is corrupted \(\d+ bytes, its sidecar "
                       r"layer0_spec.npz.json records \d+\): regenerate it with: snakemake --cores all "
                       r"data/certify/m/layer0_spec.npz --forcerun certify_layer$"):
        load_unit("m", 0, 1, 0, 2, 0.01, root=tmp_path / "data")
    extracted.write_bytes(b"")
    with pytest.raises(IntermediateError, match=r"layer0.npz is corrupted \(0 bytes"):
        load_unit("m", 0, 1, 0, 2, 0.01, root=tmp_path / "data")


def test_a_min_ip_file_in_another_grids_folder_is_refused(tmp_path):
    """Min-IP files live under their grid's name (`minip.name`); one copied into another grid's folder is refused by
    what its sidecar records."""
    path = tmp_path / "data/minip/default/sweep.csv"
    path.parent.mkdir(parents=True)
    path.write_text("setting\nwitness\n")
    write_sidecar(path, {"stage": "minip_collect", "params": {"grid": "paper"}})
    with pytest.raises(IntermediateError) as e:
        verify_intermediate(path)
    assert _message(e) == (f"{path} was written for the Min-IP grid paper, not default (its sidecar sweep.csv.json "
                           "says): regenerate it with: snakemake --cores all data/minip/default/sweep.csv --forcerun "
                           "minip_collect")
    write_sidecar(path, {"stage": "minip_collect", "params": {"grid": "default"}})
    assert verify_intermediate(path) == path


def test_write_sidecar_needs_the_file_first(tmp_path):
    with pytest.raises(FileNotFoundError, match="write the file before its sidecar"):
        write_sidecar(tmp_path / "nothing.csv", {"stage": "x"})


def _rule_outputs() -> dict[str, list[str]]:
    """{rule: its output paths with sample wildcard values}, read from the text of workflow/rules/*.smk."""
    sample = {"model": "m", "layer": "3", "transition": "2", "setting": "witness", "seed": "0", "table": "witness",
              "grid": "g", "length": "16", "lengths": "16-64", "head": "0", "audit_part": "layer1", "m": "r1", "s": "0"}
    out = {}
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        text = smk.read_text()
        consts = dict(re.findall(r'^([A-Z_]+) = \[?"([^"]+)"\]?$', text, re.M))
        blocks = [(m.group(1), m.group(2), "    ") for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^rule |^for |\Z)",
                                                                   text, re.M | re.S)]
        # rules generated in a loop, one per group of jobs (`name: f"{family}_{...}"`): under the family's name
        blocks += [(m.group(1), m.group(2), "        ") for m in re.finditer(
            r'^    rule:\n        name:\n            f"(\w+?)_\{[^\n]*\n(.*?)(?=^\S|\Z)', text, re.M | re.S)]
        for rule, body, indent in blocks:
            section = re.search(rf"^{indent}output:\n(.*?)(?=^{indent}\w+:|\Z)", body, re.M | re.S)
            paths = re.findall(r'"([^"]+)"', section.group(1)) if section else []
            paths += (
                [consts[c] for c in re.findall(r"\b([A-Z_]+)\b", section.group(1)) if c in consts] if section else []
            )
            out[rule] = [re.sub(r"\{+(\w+)\}+", lambda w: sample.get(w.group(1), w.group(1)), p) for p in paths
                         if p.startswith(("data/", "figures/"))]  # not the report captions
    return out


def test_the_producing_rules_are_the_rules_that_write_those_files():
    outputs = _rule_outputs()
    assert {"extract", "certify_layer", "baselines_layer", "minip_train"} <= set(outputs)
    covered = set()
    for rule, paths in outputs.items():
        for p in paths:
            found, target = producing_rule(p)
            if found is not None:
                assert (found, target) == (rule, p), p
                covered.add(found)
            else:  # files no job reads: figures, tables, the sidecars themselves
                assert p.startswith("figures/") or p.removesuffix(".json") in paths, f"{p} of {rule}: no rule known"
    assert covered == {rule for _, rule in PRODUCED_BY}
    assert regenerate_command("/x/run/data/extract/gpt2/layer11.npz") == \
        "snakemake --cores all data/extract/gpt2/layer11.npz --forcerun extract"
    assert regenerate_command("elsewhere/file.csv") == "snakemake --cores all --force elsewhere/file.csv"
    # the Min-IP runs' rules are one per group of jobs (minip_train_*): the run's own job is forced
    assert regenerate_command("data/minip/default/runs/witness/r1_s0.json") == \
        "snakemake --cores all --force data/minip/default/runs/witness/r1_s0.json"


def test_snakemake_reads_the_command_as_one_target_and_its_rule():
    """`--forcerun` takes every word after it as a rule name: the target must come before it."""
    from snakemake.cli import get_argument_parser

    parser = get_argument_parser()
    for path, rule in (("data/certify/m/layer0_spec.npz", {"certify_layer"}), ("elsewhere/file.csv", set()),
                       ("data/minip/g/runs/witness/r1_s0.json", set())):
        args = parser.parse_args(regenerate_command(path).split()[1:])
        assert list(args.targets) == [path] and set(args.forcerun) == rule and args.force == (not rule)


def test_sidecars_whose_file_is_gone_are_removed_and_nothing_else(tmp_path):
    """What Snakemake leaves when it removes the outputs of a failed job: X.json without X. Those go; a sidecar
    with its file, an output that is itself a .json (with its own sidecar) and a non-sidecar .json stay."""
    from attncert.integrity.file_integrity import remove_orphan_sidecars

    kept = write_extracted(tmp_path, layer=1)
    orphan = write_extracted(tmp_path, layer=0)
    orphan.unlink()
    measured = tmp_path / "figures/tables/m/certify_measured.json"
    measured.parent.mkdir(parents=True)
    measured.write_text(json.dumps({"values": {"sha256": "x", "size_bytes": 1}}))  # an output, not a sidecar
    write_sidecar(measured, {"stage": "certify_table"})
    lone_output = tmp_path / "data/minip/g/witness_bound.json"
    lone_output.parent.mkdir(parents=True)
    # `witness_bound` does not exist: still an output
    lone_output.write_text(json.dumps({"sha256": "x", "size_bytes": 1}))
    notes = tmp_path / "data/extract/m/notes.txt.json"
    notes.write_text("not a sidecar")
    removed = remove_orphan_sidecars([tmp_path / "data", tmp_path / "figures"])
    assert removed == [tmp_path / "data/extract/m/layer0.npz.json"]
    for path in (
        kept,
        tmp_path / "data/extract/m/layer1.npz.json",
        measured,
        tmp_path / "figures/tables/m/certify_measured.json.json",
        lone_output,
        notes,
    ):
        assert path.exists(), path
