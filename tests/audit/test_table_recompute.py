"""The summary tables of a tiny run (written by the pipeline's own entry scripts) are recomputed from its row tables
and pass; a forger's edit of a summary table, its sidecar re-signed, fails on that table, column and row."""
import json
import shutil

import pandas as pd
import pytest

from attncert.audit import table_coverage
from attncert.audit.table_recompute import audit_summary_tables
from attncert.integrity.file_integrity import sidecar_path
from attncert.paper_comparison.readme_results import BEGIN, END, from_snapshot
from attncert.provenance.provenance import write_sidecar
from summary_run import MODEL, write_run

TABLES = ["certification.csv", "certification_slopes.csv", "certification_vs_paper.csv", "soundness_violations.csv",
          "certification.md", "certify_measured.json", "block_summary.csv", "block_vs_paper.csv",
          "block_certificate.csv", "block_measured.json", "long_context.md", "long_context_measured.json",
          "baselines.csv", "baselines_slopes.csv", "baselines_headline.csv", "baselines.md", "baselines_measured.json",
          "paper_vs_reproduced.csv", "paper_vs_reproduced.md", "paper_vs_reproduced.json"]


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("summary_run")
    write_run(root)
    return root


@pytest.fixture
def run(clean_run, tmp_path):
    """A fresh copy of the tiny run that a test may tamper with: (root, data/, figures/tables/{model}/)."""
    root = tmp_path / "run"
    shutil.copytree(clean_run, root)
    return root, root / "data", root / "figures" / "tables" / MODEL


def audit(root) -> pd.DataFrame:
    return pd.DataFrame(audit_summary_tables(root / "data", root / "figures" / "tables", MODEL))


def failures(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "fail"]


def re_signed(path, edit) -> None:
    """Edit a summary file and re-sign its sidecar, as a deliberate forger would."""
    edit(path)
    write_sidecar(path, json.loads(sidecar_path(path).read_text()))


def edit_csv(column=None, row=0, fn=None, drop=False):
    def edit(path):
        df = pd.read_csv(path)
        if drop:
            df = df.drop(index=row)
        else:
            df.loc[row, column] = fn(df.loc[row, column])
        df.to_csv(path, index=False)
    return edit


def test_every_summary_table_of_a_clean_run_passes(clean_run):
    df = audit(clean_run)
    assert failures(df).empty, failures(df)[["table", "number", "row", "reason"]].to_string()
    passed = set(df.loc[df["status"] == "pass", "table"])
    assert set(TABLES) <= passed, set(TABLES) - passed
    assert (df["check"] == "tables").all()
    readme = df[df["table"].isin(["README.md", "results.md"])]
    assert (readme["status"] == "not applicable").all() and len(readme) == 2  # no reference run in the tiny run


def test_the_records_have_the_audit_tables_keys(clean_run):
    row = table_coverage._row_record("certify", 0, 0, {}, "x", "pass", "c", "r")
    assert all(list(r) == list(row) for r in audit_summary_tables(clean_run / "data", clean_run / "figures" / "tables",
                                                                  MODEL))


def test_a_gap_divided_by_100_fails(run):
    root, _, out = run
    re_signed(out / "certification.csv", edit_csv("median_rel_gap_second", 1, lambda v: v / 100))
    bad = failures(audit(root))
    assert list(zip(bad["table"], bad["number"], bad["row"])) == [("certification.csv", "median_rel_gap_second", 1)]
    assert "stored" in bad["reason"].iloc[0] and bad["reported"].notna().all()


def test_the_block_certificate_ratio_set_to_one_half_fails(run):
    root, _, out = run
    re_signed(out / "block_certificate.csv", edit_csv("second_order_certificate_over_ascent", 2, lambda v: 0.5))
    bad = failures(audit(root))
    assert list(zip(bad["table"], bad["number"], bad["row"])) == [
        ("block_certificate.csv", "second_order_certificate_over_ascent", 2)]


@pytest.mark.parametrize("table", ["certification.csv", "block_summary.csv", "baselines.csv"])
def test_a_deleted_row_fails(run, table):
    root, _, out = run
    re_signed(out / table, edit_csv(row=0, drop=True))
    bad = failures(audit(root))
    assert set(bad["table"]) == {table} and list(bad["number"]) == ["rows"]
    assert "missing" in bad["reason"].iloc[0]


@pytest.mark.parametrize("table", ["block_summary.csv", "certify_measured.json", "long_context.md"])
def test_a_missing_summary_table_fails(run, table):
    root, _, out = run
    (out / table).unlink()
    sidecar_path(out / table).unlink(missing_ok=True)
    bad = failures(audit(root))
    assert list(zip(bad["table"], bad["number"])) == [(table, "file")] and "missing" in bad["reason"].iloc[0]


def test_an_edited_measured_value_fails_in_both_files_that_carry_it(run):
    root, _, out = run

    def lower(key):
        def edit(path):
            rec = json.loads(path.read_text())
            if "values" in rec:  # a stage's measured file
                rec["values"][key] /= 100
            else:  # the paper comparison's snapshot
                rec["measured"][key]["value"] /= 100
            path.write_text(json.dumps(rec, indent=2, sort_keys=True))
        return edit

    re_signed(out / "certify_measured.json", lower("second_order_rel_gap_r0.002"))
    lower("second_order_rel_gap_r0.002")(out / "paper_vs_reproduced.json")  # the snapshot has no sidecar
    bad = failures(audit(root))
    assert sorted(zip(bad["table"], bad["number"])) == [
        ("certify_measured.json", "values.second_order_rel_gap_r0.002"),
        ("paper_vs_reproduced.json", "measured.second_order_rel_gap_r0.002.value")]


def test_an_edited_markdown_table_fails(run):
    root, _, out = run

    def edit(path):  # one digit of the first data row ("# title", "", header, separator, row)
        lines = path.read_text().split("\n")
        at = next(i for i, ch in enumerate(lines[4]) if ch.isdigit())
        lines[4] = lines[4][:at] + str((int(lines[4][at]) + 1) % 10) + lines[4][at + 1:]
        path.write_text("\n".join(lines))

    re_signed(out / "block_summary.md", edit)
    bad = failures(audit(root))
    assert list(zip(bad["table"], bad["number"], bad["row"])) == [("block_summary.md", "text", 4)]


def test_an_edit_without_re_signing_fails_the_sidecar(run):
    root, _, out = run
    edit_csv("units", 0, lambda v: v + 1)(out / "certification.csv")
    bad = failures(audit(root))
    assert list(bad["table"]) == ["certification.csv"] and "sidecar" in bad["reason"].iloc[0]


def _adopt(root):
    """The README and docs/results.md as `readme_results` renders them after adopting this run's snapshot."""
    snapshot = root / "figures" / "tables" / MODEL / "paper_vs_reproduced.json"
    shutil.copyfile(snapshot, root / "data" / "reference_run.json")
    block, results = from_snapshot(root / "data" / "reference_run.json", root / "data" / "paper_claims.yaml")
    (root / "README.md").write_text(f"# x\n\n{BEGIN}\n{block}\n{END}\n")
    (root / "docs").mkdir()
    (root / "docs" / "results.md").write_text(results)


def test_the_readme_of_the_reference_run_is_recomputed(run):
    root, _, _ = run
    _adopt(root)
    df = audit(root)
    readme = df[df["table"].isin(["README.md", "results.md"])]
    assert list(readme["status"]) == ["pass", "pass"] and failures(df).empty


def test_an_edited_readme_tally_of_the_reference_run_fails(run):
    root, _, _ = run
    _adopt(root)
    readme = root / "README.md"
    text = readme.read_text()
    first = text.index("reproduced ") + len("reproduced ")
    count = text[first:].split(",")[0]
    readme.write_text(text[:first] + str(int(count) + 1) + text[first + len(count):])
    bad = failures(audit(root))
    assert list(zip(bad["table"], bad["number"])) == [("README.md", "text")]


def test_the_stored_measured_files_are_read_where_the_run_writes_them(tmp_path):
    """The method checks sit with the model's tables, Min-IP's under its grid (`minip.name` of the run's
    configuration); both join the recomputed paper comparison as stored, their sidecars checked."""
    from attncert.audit.paper_tables_expected import joined_measured, other_measured_paths
    from attncert.paper_comparison.paper_comparison import write_measured

    tables = tmp_path / "figures" / "tables"
    paths = other_measured_paths(tables, MODEL, {"minip": {"name": "g"}})
    assert paths == [tables / MODEL / "method_checks_measured.json", tables / "minip" / "g" / "minip_measured.json"]
    for path, key in zip(paths, ("a_method_value", "a_minip_value")):
        path.parent.mkdir(parents=True)
        write_measured(path, {key: 1.5}, "grid")
        write_sidecar(path, {"stage": "x"})
    joined = joined_measured({}, paths)
    assert {k: v["source"] for k, v in joined.items()} == {"a_method_value": "method_checks", "a_minip_value": "minip"}
    assert other_measured_paths(tables, MODEL, None) == paths[:1]  # no configuration, no grid: left out
