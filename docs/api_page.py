"""Render docs/api.md, the API reference, from the docstrings of the public objects listed in OBJECTS.

    PYTHONPATH=src python docs/api_page.py            # rewrite docs/api.md
    PYTHONPATH=src python docs/api_page.py --check    # exit 1 if docs/api.md is not what this renders

OBJECTS is the one list of what the page documents, chosen by public role (the problem, each certificate, the
baselines, the block analysis, Min-IP, the command line). Each entry names an object by its import path; a
module that moves is a one-line change here, then a re-render. A command-line entry names the function whose
`--help` text the page shows, under the subcommand's line of `attncert --help` (`attncert.cli.SUBCOMMANDS`).
`tests/test_api_page.py` fails when docs/api.md differs from the rendering, when a listed object has no docstring
of its own, or when a listed command has no description or no `--help` text.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import os
import sys
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "api.md"


class Entry(NamedTuple):
    section: str
    path: str  # import path of the object (for a command: of its main(argv) function)
    command: str | None = None  # the command line it implements, e.g. "attncert certify"


OBJECTS = [
    Entry("The problem", "attncert.head.problem.HeadProblem"),
    Entry("The problem", "attncert.head.problem.HeadProblem.value"),
    Entry("The problem", "attncert.head.problem.HeadProblem.negated"),
    Entry("The problem", "attncert.head.reduced_geometry.reduced_geometry"),
    Entry("The problem", "attncert.head.units.load_unit"),
    Entry("The problem", "attncert.checkpoint.one_head.HeadRequest"),
    Entry("The problem", "attncert.checkpoint.one_head.checkpoint_head"),
    Entry("Exact worst case and first-order certificate", "attncert.certify.exact_worst_case.exact_worst_case"),
    Entry("Exact worst case and first-order certificate",
          "attncert.certify.first_order_certificate.first_order_certificate"),
    Entry("Exact worst case and first-order certificate",
          "attncert.certify.best_feasible_ascent.best_feasible_ascent"),
    Entry("Second-order certificate", "attncert.certify.second_order.certificate.second_order_certificate"),
    Entry("Second-order certificate", "attncert.certify.second_order.certificate.paper_like_solve"),
    Entry("Second-order certificate", "attncert.certify.second_order.relaxation.rows.SecondOrderResult"),
    Entry("Second-order certificate", "attncert.certify.secant_slack_bound.secant_slack_bound"),
    Entry("Baselines", "attncert.baselines.linear_bound_baselines.baseline_upper_bound"),
    Entry("Baselines", "attncert.baselines.linear_bound_baselines.baseline_upper_bounds"),
    Entry("Block-residual analysis", "attncert.block.residual.analyze_transition"),
    Entry("Block-residual analysis", "attncert.block.certificate.certify_transition"),
    Entry("Min-IP (Paper B)", "attncert.minip.lower_bound.rank_lower_bound"),
    Entry("Min-IP (Paper B)", "attncert.minip.lower_bound.witness_bound"),
    Entry("Audit", "attncert.audit.audit_table.audit_model"),
    Entry("Command line", "attncert.checkpoint.command.main", "attncert certify"),
    Entry("Command line", "attncert.audit.audit_table.main", "attncert audit"),
]

HELP_COLUMNS = "100"  # argparse wraps --help to $COLUMNS; fixed so the page does not depend on the terminal
WIDTH = 110  # a signature longer than this is written one parameter per line


def resolve(path: str):
    """The object at an import path `package.module.Name[.attribute]`: the longest importable module prefix,
    then attributes."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"{path}: no importable module prefix")


def own_docstring(obj) -> str | None:
    """The object's own docstring, cleaned; None if it has none (a dataclass's generated
    `Name(field: type, ...)` text and a docstring inherited from a base class do not count)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    if not doc or not doc.strip():
        return None
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return None
    return inspect.cleandoc(doc)


def describe(e: Entry) -> str | None:
    """The entry's text: its docstring, or for a command its line of `attncert --help` (None if missing)."""
    if e.command:
        from attncert.cli import SUBCOMMANDS

        what = SUBCOMMANDS.get(e.command.split()[-1])
        return f"{what[0].upper()}{what[1:]}." if what else None
    return own_docstring(resolve(e.path))


def missing_docstrings() -> list[str]:
    """The entries of OBJECTS without a docstring of their own (a command: without a description or
    `--help` text)."""
    return [e.path for e in OBJECTS
            if describe(e) is None or (e.command and not command_help(resolve(e.path)))]


def _annotation(a) -> str:
    return a if isinstance(a, str) else inspect.formatannotation(a)


def _default(v) -> str:
    text = repr(v)
    return "…" if " at 0x" in text else text


def signature(name: str, obj) -> str:
    """`name(param: type = default, ...) -> type`, annotations as written in the source."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    params, star_done = [], False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not star_done:
            params.append("*")
            star_done = True
        text = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "") + p.name
        star_done = star_done or p.kind is p.VAR_POSITIONAL
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {_default(p.default)}" if p.annotation is not p.empty else f"={_default(p.default)}"
        params.append(text)
    ret = "" if sig.return_annotation is sig.empty or inspect.isclass(obj) else \
        f" -> {_annotation(sig.return_annotation)}"
    one = f"{name}({', '.join(params)}){ret}"
    if len(one) <= WIDTH:
        return one
    return f"{name}(\n" + "".join(f"    {p},\n" for p in params) + f"){ret}"


def command_help(obj) -> str:
    """What `obj(["--help"])` prints (argparse exits after printing)."""
    out = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        with contextlib.redirect_stdout(out):
            try:
                obj(["--help"])
            except SystemExit:
                pass
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue().rstrip()


def source_link(obj) -> str:
    """A link to the file that defines obj, relative to docs/."""
    target = inspect.unwrap(obj)
    path = Path(inspect.getsourcefile(target)).resolve().relative_to(REPO)
    return f"[{path}](../{path})"


def render_entry(e: Entry) -> list[str]:
    obj = resolve(e.path)
    doc = describe(e)
    if doc is None:
        raise ValueError(f"{e.path} has no docstring of its own")
    short = e.path.rsplit(".", 2 if "." in obj.__qualname__ else 1)
    name = ".".join(short[1:])
    if e.command:
        lines = [f"### `{e.command}`", "", f"`{e.path}(argv)`, in", source_link(obj), "", doc, "",
                 "```text", command_help(obj), "```", ""]
    else:
        kind = "class" if inspect.isclass(obj) else "function"
        lines = [f"### `{name}`", "", f"{kind} `{e.path}`, in", source_link(obj), "",
                 "```python", signature(name, obj), "```", "", doc, ""]
    return lines


def render() -> str:
    """The whole of docs/api.md."""
    lines = ["# API reference", "",
             "<!-- generated by `PYTHONPATH=src python docs/api_page.py` from the docstrings; do not edit -->", "",
             "The public entry points, grouped by stage; the mathematics behind each is in the pages of the",
             "[documentation map](README.md). Every object is importable with `src/` on the path",
             "(`pip install -e .` or `PYTHONPATH=src`).", ""]
    sections = list(dict.fromkeys(e.section for e in OBJECTS))
    lines += [f"- [{s}](#{s.lower().replace(' ', '-').replace('(', '').replace(')', '')})" for s in sections]
    lines.append("")
    for section in sections:
        lines += [f"## {section}", ""]
        for e in OBJECTS:
            if e.section == section:
                lines += render_entry(e)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(f"{PAGE.relative_to(REPO)} is out of date; fix: PYTHONPATH=src python docs/api_page.py",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
