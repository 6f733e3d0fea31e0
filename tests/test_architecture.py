"""The package's architecture, checked from the source text: stages import one way, no import circles,
small modules, thin entry scripts.

Stages (subpackages of `attncert`) and what each may import besides itself. The foundation, from the ground up:

    figure_style     the one figure style (names, colours, sizes, the paper's marks)  (matplotlib only)
    integrity        atomic writes, sidecar checksums, the model a file was written for
    model            model sources (embedded, hub, directory, random-gpt2, tiny), extraction  -> integrity
    configuration    the schema, validation with one-line errors, the torch device  -> integrity, model
    provenance       sidecars, the code hash, one identity per run, job logs        -> configuration, integrity, model
    reporting        table and figure files, the unit tables' derived columns      -> integrity
    paper_comparison the papers' claims, verdicts, the README's tally              -> FOUNDATION

The stages (FOUNDATION = integrity, model, configuration, provenance, reporting):

    head       one head and its perturbation set, rounding, the fixed-query reduction  -> FOUNDATION
    certify    exact worst case and the certificates                  -> figure_style, head, FOUNDATION
    baselines  IBP / CROWN / alpha-CROWN                              -> figure_style, head, FOUNDATION
    block      block-residual analysis (reuses the baselines' bound modules)
                                                      -> baselines, figure_style, head, FOUNDATION
    minip      Paper B                                                -> figure_style, FOUNDATION
    audit      independent checks of the certified numbers (numpy, python-flint)     -> certify, head, FOUNDATION
               and the summary tables recomputed with the stages' pure table code  -> baselines, block,
               paper_comparison
    checkpoint certify one head of a local checkpoint (attncert certify)  -> baselines, certify, head, FOUNDATION
    cli        the `attncert` command: dispatches to its subcommands                 -> audit, checkpoint, FOUNDATION
               (the certificate format and the program builders only, never a solver:
               tests/audit/test_trusted_base.py lists every module it may reach)

Anything two stages share lives in a stage both may import; nothing imports sideways or up.
"""
import ast
import re
from pathlib import Path

from conftest import REPO

SRC = REPO / "src" / "attncert"
FOUNDATION = {"integrity", "model", "configuration", "provenance", "reporting"}
ALLOWED = {
    "figure_style": set(),
    "integrity": set(),
    "model": {"integrity"},
    "configuration": {"integrity", "model"},
    "provenance": {"configuration", "integrity", "model"},
    "reporting": {"integrity"},
    "paper_comparison": FOUNDATION,
    "head": FOUNDATION,
    "certify": {"figure_style", "head"} | FOUNDATION,
    "baselines": {"figure_style", "head"} | FOUNDATION,
    "block": {"baselines", "figure_style", "head"} | FOUNDATION,
    "minip": {"figure_style"} | FOUNDATION,
    # baselines, block, paper_comparison: their pure table code only, to recompute the summary tables
    # (audit/table_recompute.py; tests/audit/test_trusted_base.py lists every module the audit may reach)
    "audit": {"baselines", "block", "certify", "head", "paper_comparison"} | FOUNDATION,
    "checkpoint": {"baselines", "certify", "head"} | FOUNDATION,
    "cli": {"audit", "checkpoint"} | FOUNDATION,
}
MAX_MODULE_LINES = 450
MAX_SCRIPT_LINES = 60


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """attncert modules imported anywhere in the file (module level or inside functions)."""
    tree = ast.parse(path.read_text())
    pkg = _module_name(path).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("attncert.")}


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    return {name: {m for m in _imports(p) if m in files and m != name} for name, p in files.items()}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def test_every_subpackage_is_a_known_stage():
    stages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert stages == set(ALLOWED), stages ^ set(ALLOWED)
    assert not [p.name for p in SRC.glob("*.py") if p.name != "__init__.py"], "modules belong in a stage"


def stage_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in graph.items():
        for dep in deps:
            a, b = _stage(mod), _stage(dep)
            if a and b and a != b and b not in ALLOWED[a]:
                bad.append(f"{mod} -> {dep} ({a} may import {sorted(ALLOWED[a]) or 'nothing'})")
    return bad


def circles(graph: dict[str, set[str]]) -> list[str]:
    # a package's __init__ re-exporting its own modules is not a circle through the package
    graph = {m: {d for d in deps if not (m.startswith(d + ".") and d in graph)} for m, deps in graph.items()}
    state, stack, found = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                found.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return found


def test_imports_follow_the_stage_order():
    assert not (bad := stage_violations(_graph())), "\n".join(bad)


def test_no_import_circles():
    assert not (found := circles(_graph())), "\n".join(found)


def test_the_checks_see_planted_faults():
    """A sideways import, an upward import (also inside the foundation) and a circle planted into the real graph
    are all reported."""
    graph = _graph()
    assert "attncert.head.problem" in graph["attncert.certify.run"]  # the parser sees real imports
    graph["attncert.baselines.layer"] = graph["attncert.baselines.layer"] | {"attncert.certify.run"}
    graph["attncert.head.problem"] = graph["attncert.head.problem"] | {"attncert.certify.run"}
    graph["attncert.integrity.file_integrity"] = graph["attncert.integrity.file_integrity"] | {
        "attncert.provenance.provenance"}
    bad = stage_violations(graph)
    assert any("integrity.file_integrity -> attncert.provenance.provenance" in b for b in bad)
    assert any("baselines.layer -> attncert.certify.run" in b for b in bad)
    assert any("head.problem -> attncert.certify.run" in b for b in bad)
    assert any("attncert.head.problem" in c and "attncert.certify.run" in c for c in circles(graph))


def test_modules_and_scripts_are_small():
    long_modules = [f"{p.relative_to(REPO)}: {n}" for p in SRC.rglob("*.py")
                    if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long_modules, long_modules
    scripts = list((REPO / "workflow" / "scripts").glob("*.py"))
    long_scripts = [f"{p.name}: {n}" for p in scripts if (n := len(p.read_text().splitlines())) > MAX_SCRIPT_LINES]
    assert not long_scripts, long_scripts


def test_scripts_read_values_only_from_input_and_params():
    offenders = [p.name for p in (REPO / "workflow" / "scripts").glob("*.py")
                 if re.search(r"\bsnakemake\.config\b|\bsm\.config\b", p.read_text())]
    assert not offenders, offenders


def test_no_code_comment_cites_an_issue_number():
    """Code says what it does, not which issue asked for it (that history is in git and CHANGELOG.md)."""
    files = [*SRC.rglob("*.py"), *(REPO / "workflow").rglob("*.py"), *(REPO / "workflow").rglob("*.smk"),
             REPO / "Snakefile"]
    cited = [f"{p.relative_to(REPO)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\bissues? #?\d+", line, re.I)]
    assert not cited, cited
