"""Every benchmark script uses the one interface of bench/common.py: a module of the bench package (no
sys.path edits), a QUICK size set that --quick applies, and its result written by common.run."""
import argparse
import ast
import re
import sys
from pathlib import Path

import pytest

from bench import common

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name not in ("__init__.py", "common.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_script_uses_the_common_interface(script):
    text = script.read_text()
    assert "sys.path" not in text and "spec_from_file_location" not in text, "import shared code from the bench package"
    assert re.search(r"^QUICK\b.*=", text, re.M), "a QUICK size set for --quick"
    assert "common.run(" in text and "common.parse(" in text
    assert f"python -m bench.{script.stem}" in text, "the docstring shows how to run it"
    assert f"`{script.stem}`" in (BENCH / "README.md").read_text(), "bench/README.md lists it"


def test_quick_replaces_the_sizes_and_names_the_result(tmp_path):
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=500)
    args = common.parse(ap, {"units": 3}, ["--quick", "--results", str(tmp_path)])
    assert args.units == 3 and common.result_name("x", args, "time") == "x-time-quick"
    full = common.parse(argparse.ArgumentParser(), {}, [])
    assert common.result_name("x", full) == "x"
    with pytest.raises(AttributeError, match="--sample"):
        common.parse(argparse.ArgumentParser(), {"sample": 1}, ["--quick"])


def test_run_writes_markdown_and_json_with_provenance(tmp_path, capsys):
    args = common.parse(argparse.ArgumentParser(), {}, ["--quick", "--results", str(tmp_path)])

    def main(a):
        print("| a | b |")
        return {"answer": 42}

    record = common.run("demo", main, args)
    assert "| a | b |" in capsys.readouterr().out
    md, js = (tmp_path / "demo-quick.md").read_text(), (tmp_path / "demo-quick.json").read_text()
    assert "| a | b |" in md and record["provenance"]["git_commit"][:12] in md
    assert '"answer": 42' in js and record["report"] == ["| a | b |"]
    assert {"command", "started_utc", "wall_seconds", "git_commit", "packages", "load_average"} <= set(
        record["provenance"]
    )


def test_results_name_no_path_of_this_machine(tmp_path):
    """Paths inside the repository are written relative to it (a result must read the same on any machine)."""
    args = common.parse(argparse.ArgumentParser(), {}, ["--quick", "--results", str(tmp_path)])
    record = common.run("where", lambda a: {"config": common.REPO / "workflow" / "config" / "default.yaml"}, args)
    assert record["result"]["config"] == "workflow/config/default.yaml"
    assert str(common.REPO) not in (tmp_path / "where-quick.json").read_text()
    assert str(common.REPO) not in (tmp_path / "where-quick.md").read_text()


def test_context_length_figure_draws_every_mode_present(tmp_path):
    """A varying-query-only result draws its own row (cost, and the gap per norm), not empty fixed-query axes."""
    from bench.context_length import figure

    def cell(s, gap):
        return dict(median_s=s, **{f"rel_gap_{nm}_r0.002": gap * f for nm, f in (("l2", 1.0), ("linf", 10.0))},
                    **{"rel_gap_r0.002": gap})

    summ = {"fixed": {}, "varying": {str(n): {"second_order": cell(0.01 * n, 1e-3), "first_order": cell(1e-3, 0.5)}
                                     for n in (16, 64, 256)}, "exponents": {}, "violations": []}
    drawn = figure(summ, tmp_path / "v.png")
    assert drawn == {("varying", "cost"): 2, ("varying", "gap"): 4, ("varying", "growth"): 1}
    for n in (16, 64, 256):  # a second radius: one more growth curve, the first-order certificate has none
        summ["varying"][str(n)]["second_order"]["rel_gap_r0.02"] = 0.05 * n ** 0.1
    assert figure(summ, tmp_path / "v.png")[("varying", "growth")] == 2
    assert (tmp_path / "v.png").stat().st_size > 10_000
    summ["fixed"] = {"16": {"exact": dict(median_s=1e-3), "second_order": cell(0.1, 1e-4)}}
    drawn = figure(summ, tmp_path / "fv.png")
    assert drawn[("fixed", "cost")] == 2 and drawn[("fixed", "gap")] == 1 and drawn[("varying", "gap")] == 4
    assert drawn[("fixed", "growth")] == 0  # one n: nothing to grow from


def test_context_length_merges_disjoint_parts_and_refuses_a_unit_twice(tmp_path):
    """`--merge` makes one result of parts run separately (each row names its part); a unit in two parts is an
    error, not a silent double count in the medians."""
    import json

    from bench.context_length import merged

    def part(name, ns):
        rows = [dict(mode="varying", head=h, n=n, radius=0.002, norm="linf", reference=1.0, movement=0.5)
                for n in ns for h in range(2)]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"result": {"rows": rows}}))
        return path

    data = merged([part("a", [16, 64]), part("b", [1024])])
    assert data["ns"] == [16, 64, 1024] and len(data["rows"]) == 6
    assert [r["source"] for r in data["rows"]] == ["a.json"] * 4 + ["b.json"] * 2
    with pytest.raises(SystemExit, match="both hold the unit"):
        merged([part("a", [16, 64]), part("c", [64])])


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_no_blas_is_loaded_before_the_thread_count_is_set(script):
    """numpy (or anything that imports it) imported before `common.single_threaded_blas()` fixes OpenBLAS at its
    default thread count, and the long varying program's certified bounds depend on it in their last bits (a
    rerun with two threads moved one by 7 % of its gap). Before the call: the standard library, `bench.common`,
    and `bench.context_length` (which sets the thread count itself before importing numpy)."""
    body = ast.parse(script.read_text()).body
    calls = [i for i, node in enumerate(body) if isinstance(node, ast.Expr) and "single_threaded_blas" in
             ast.unparse(node)]
    for node in body[:calls[0]] if calls else []:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or name in ("bench.common", "bench.context_length.relative_gap"), (
                f"{script.name} imports {name} before setting the BLAS thread count")
