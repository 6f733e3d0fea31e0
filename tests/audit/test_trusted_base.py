"""The checker's trusted base, enforced on the source: every module `attncert.audit` can import (module level or
inside a function, followed through attncert's own modules) is on this list, and none is a solver, torch, or the
code that solves."""
import ast
import shutil
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# attncert modules the checker may reach: its own, the certificate format, the builders (no solver), the head's
# reduction, the file checks (with the model a file was written for: model_identity, no imports) and provenance
ALLOWED = {
    "attncert", "attncert.audit", "attncert.certify", "attncert.certify.second_order",
    "attncert.certify.certificate_store", "attncert.certify.second_order.dual_bound.compiled",
    "attncert.certify.second_order.dual_bound.data_error",
    "attncert.certify.second_order.relaxation.facets", "attncert.certify.second_order.fixed_query.program",
    "attncert.certify.second_order.relaxation.rows", "attncert.certify.first_order_certificate",
    "attncert.certify.second_order.relaxation", "attncert.certify.second_order.dual_bound",
    "attncert.certify.second_order.fixed_query", "attncert.certify.second_order.varying_query",
    "attncert.certify.second_order.varying_query.data", "attncert.certify.second_order.varying_query.program",
    "attncert.certify.second_order.varying_query.unfactored_program",
    "attncert.certify.second_order.varying_query.long_program",
    "attncert.certify.second_order.varying_query.shift_moment",
    "attncert.certify.second_order.varying_query.box_scaling",  # the budgets' diagonal scalings (numpy only)
    "attncert.certify.second_order.relaxation.key_support_cut",  # the long builder's support cuts (numpy only)
    "attncert.head.unit_grid",
    "attncert.head", "attncert.head.problem", "attncert.head.rounding", "attncert.head.fixed_query",
    "attncert.head.negligible_tokens", "attncert.head.projected_ball", "attncert.head.reduced_geometry",
    "attncert.integrity", "attncert.integrity.intermediate_check", "attncert.integrity.file_integrity",
    "attncert.integrity.model_identity", "attncert.head.specification",
    "attncert.certify.second_order.fixed_query.token_program",
    # reached through the varying-query builder (head_bilinear_bound): the certifier's float bilinear bound and the
    # optimizer (scipy L-BFGS-B) that picks its diagonal scalings; the audit never calls it (it evaluates the
    # row's stored scalings in balls: head_enclosure.diagonal_bound)
    "attncert.certify.diagonal_bilinear_bound",
    # where the checkpoint is and its files' sha256 (audit/model_weights; stdlib only, no torch, no transformers)
    "attncert.provenance", "attncert.provenance.checkpoint_files",
    # the summary tables' recomputation (audit/table_recompute.py) renders them with the writers' own pure table
    # code: pandas and scipy.stats on the row tables, no torch, no solver, no solving code
    "attncert.reporting", "attncert.reporting.table_files", "attncert.reporting.unit_tables",
    "attncert.certify.summary", "attncert.certify.long_context_summary",
    "attncert.block", "attncert.block.report",
    "attncert.baselines", "attncert.baselines.comparison", "attncert.baselines.seconds_beside",
    "attncert.paper_comparison", "attncert.paper_comparison.claims", "attncert.paper_comparison.paper_comparison",
    "attncert.paper_comparison.readme_results", "attncert.paper_comparison.sentence_tally",
    "attncert.paper_comparison.verdict",
    # the README's run-time sentence, rendered from data/reference_run.json's record (pandas and text only)
    "attncert.reporting.run_cost", "attncert.reporting.duration_text",
    # the tables' wording (headers in words, legends) and the noise floor they mark: text and pandas only
    "attncert.reporting.table_legend", "attncert.reporting.noise_floor", "attncert.certify.table_legend",
    "attncert.block.table_legend",
    "attncert.baselines.table_legend", "attncert.paper_comparison.table_legend",
}
# never: solvers, torch and its model code, and attncert's solving code
FORBIDDEN_THIRD_PARTY = {"clarabel", "scs", "torch", "transformers", "auto_LiRPA", "bound_propagation", "ecos",
                         "osqp", "highspy"}
FORBIDDEN = {
    "attncert.certify.second_order.dual_bound.solve_ladder",
    "attncert.certify.second_order.dual_bound.weak_duality",
    "attncert.certify.second_order.fixed_query.token_solve",
    "attncert.certify.second_order.relaxation.cutting_planes",
    "attncert.certify.dinkelbach",
    "attncert.certify.best_feasible_ascent",
    "attncert.certify.exact_worst_case",
    "attncert.certify.token_max",
    "attncert.certify.run",
    "attncert.certify.second_order.fixed_query.monolithic",
    "attncert.certify.second_order.certificate",
}


def module_file(name: str, src: Path = SRC) -> Path | None:
    base = src / Path(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def imports_of(path: Path, name: str, src: Path = SRC) -> set[str]:
    out = set()
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names if module_file(f"{base}.{a.name}", src))
    return out


def reached(src: Path = SRC) -> tuple[set[str], set[str]]:
    """(attncert modules, third-party top-level modules) reachable from attncert.audit (of the tree `src`)."""
    todo = [f"attncert.audit.{p.stem}" if p.stem != "__init__" else "attncert.audit"
            for p in (src / "attncert" / "audit").glob("*.py")]
    seen, third = set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:k]) for k in range(1, len(parts))]  # parent packages run their __init__
        path = module_file(name, src)
        if path is None:
            continue
        for imp in imports_of(path, name, src):
            if imp.split(".")[0] == "attncert":
                todo.append(imp)
            elif imp and imp.split(".")[0] not in sys.stdlib_module_names and imp != "__future__":
                third.add(imp.split(".")[0])
    return {m for m in seen if module_file(m, src)}, third


def test_checker_reaches_only_the_trusted_base():
    mods, third = reached()
    assert not (mods & FORBIDDEN), sorted(mods & FORBIDDEN)
    outside = {m for m in mods - ALLOWED if not m.startswith("attncert.audit")}
    assert not outside, sorted(outside)
    assert not (third & FORBIDDEN_THIRD_PARTY), sorted(third & FORBIDDEN_THIRD_PARTY)
    # yaml: --configfile and the papers' claims; safetensors (its numpy reader) and tokenizers: the checkpoint's
    # tensors and tokenizer (audit/model_weights), neither imports torch; pandas: the summary tables' recomputation
    # (audit/table_recompute.py)
    assert third <= {"numpy", "scipy", "flint", "cvxpy", "tqdm", "yaml", "safetensors", "tokenizers", "pandas"}, \
        sorted(third)


def test_the_scan_sees_a_forbidden_import(tmp_path):
    """The scan itself can fail: a module importing a solver inside a function is caught (in a copy of the source
    tree, so that a test running beside this one never sees the probe)."""
    shutil.copytree(SRC / "attncert", tmp_path / "attncert", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "attncert" / "audit" / "_scan_probe.py").write_text(
        "def f():\n    import clarabel\n    from attncert.certify.dinkelbach import x\n")
    mods, third = reached(tmp_path)
    assert "clarabel" in third and "attncert.certify.dinkelbach" in mods
    assert "clarabel" not in reached()[1]
