"""`snakemake --report report.html` builds the run's front page: every figure is reported as its PNG and every
summary table as an HTML page (the report shows only those inline), each with a caption free of wildcards and a
stage's category; every caption and the landing page render for every item without a reST message, and no two
report categories share a reST target name. The slow tests check the wiring against the default DAG's outputs and
build the report from a tiny run and open the HTML."""
import ast
import base64
import html
import io
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from docutils.core import publish_parts
from jinja2 import Environment

from attncert.block.figure_names import FIGURE_NAMES as BLOCK_FIGURES
from attncert.certify.figure_names import FIGURE_NAMES as CERTIFY_FIGURES
from attncert.minip.figure_names import FIGURES as MINIP_FIGURES
from attncert.reporting import report_index
from attncert.reporting.report_index import CATEGORIES, FIGURES, REPORT_TABLES, table_source
from conftest import REPO
from tiny_run import SNAKEMAKE, copy_tiny_run, run_snakemake

RULES = REPO / "workflow" / "rules"
GLOBAL_DESCRIPTION = re.compile(r'^report:\s*"([^"]+)"', re.M)
#: the wildcard that names the items of a caption file, and the items
ITEM_WILDCARDS = {"certify.rst": ("certify_figure", CERTIFY_FIGURES), "block.rst": ("block_figure", BLOCK_FIGURES),
                  "minip.rst": ("minip_figure", tuple(MINIP_FIGURES)), "tables.rst": ("page", tuple(REPORT_TABLES))}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Category:
    """A report category as the captions see it (Snakemake's has a `name`)."""

    name: str


@dataclass
class ReportCall:
    rule_file: str
    name: str          # the output's name in the rule (png, html)
    path: str          # the path expression's source text
    caption: str
    category: object   # the category's source: a string, a name of report_index, or a lambda
    subcategory: object
    labels: object


def _calls(text: str):
    """The source text of every `NAME=report(...)` output in a rule file (parentheses balanced)."""
    for m in re.finditer(r"(\w+)=report\(", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield m.group(1), text[m.start() + len(m.group(1)) + 1:i]


def _value(node):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and hasattr(report_index, node.id):
        return getattr(report_index, node.id)
    return ast.unparse(node)


def report_outputs() -> list[ReportCall]:
    """Every `report(...)` output of the rule files, its keywords read from the rule's source."""
    out = []
    for p in sorted(RULES.glob("*.smk")):
        for name, call in _calls(p.read_text()):
            node = ast.parse(call, mode="eval").body
            kw = {k.arg: k.value for k in node.keywords}
            out.append(ReportCall(p.name, name, ast.unparse(node.args[0]), _value(kw["caption"]),
                                  _value(kw["category"]) if "category" in kw else None,
                                  _value(kw["subcategory"]) if "subcategory" in kw else None,
                                  _value(kw["labels"]) if "labels" in kw else None))
    return out


def _links(categories) -> str:
    """The link targets Snakemake appends to every caption (snakemake.report: one per category)."""
    return "\n\n" + "\n".join(f".. _{c}: javascript:app.showCategory('x')" for c in sorted(categories)) + "\n"


def render_caption(path: Path, wildcards: dict, categories, params=None, input=None, files=()) -> tuple[str, str]:
    """(HTML body, docutils messages) of one caption as Snakemake renders it: Jinja with `snakemake`, `categories`
    and `files`, then reST."""
    snakemake = SimpleNamespace(wildcards=SimpleNamespace(**wildcards), config={"model": {"name": "tiny-gpt2",
                                                                                          "source": "embedded"},
                                                                                "minip": {"name": "default"}},
                                params=SimpleNamespace(**(params or {})), input=SimpleNamespace(**(input or {})))
    env = Environment(trim_blocks=True, lstrip_blocks=True)  # as Snakemake's report sets it up
    text = env.from_string(path.read_text() + _links(categories)).render(
        snakemake=snakemake, categories={Category(c): {} for c in categories}, files=list(files))
    messages = io.StringIO()
    body = publish_parts(text, writer="html", settings_overrides={"warning_stream": messages,
                                                                       "report_level": 2})["body"]
    return body, messages.getvalue()


def _item_context(caption: str, item) -> dict:
    """The wildcards, params and input of one item of a caption file."""
    wildcard, _ = ITEM_WILDCARDS.get(caption, (None, None))
    ctx = {"wildcards": {wildcard: item} if wildcard else {"model": "tiny-gpt2"}}
    if caption == "tables.rst":
        ctx.update(params={"about": REPORT_TABLES[item].about},
                   input={"table": table_source(item, "tiny-gpt2", "default")})
    return ctx


def test_every_figure_and_table_page_is_reported_with_a_caption_free_of_wildcards():
    outs = report_outputs()
    assert {o.rule_file for o in outs} == {"certify.smk", "block.smk", "minip.smk", "baselines.smk",
                                           "long_context.smk", "report.smk"}
    for o in outs:
        assert (o.name, o.path.strip("\"')")[-4:]) in (("png", ".png"), ("html", "html")), (o.rule_file, o.path)
        assert "{" not in o.caption, f"{o.rule_file}: caption {o.caption} holds a wildcard"
        assert (RULES / o.caption).resolve().is_file(), o.caption
        assert o.labels is not None, f"{o.rule_file}: {o.path} has no labels (the report would show its path)"
        if o.name == "png":  # a figure: a stage's category, under Figures
            assert o.category in CATEGORIES and o.subcategory == FIGURES, (o.rule_file, o.category)
    pages = [o for o in outs if o.name == "html"]
    assert {o.caption for o in pages} == {"../report/tables.rst", "../report/run_overview.rst"}
    first = [o for o in pages if o.category == report_index.OVERVIEW and o.subcategory == report_index.OVERVIEW_FIRST]
    assert len(first) == 1 and "run_overview" in first[0].path  # the overview: the first item of the first category
    assert sorted({t.subcategory for t in REPORT_TABLES.values() if t.category == report_index.OVERVIEW}
                  | {report_index.OVERVIEW_FIRST})[0] == report_index.OVERVIEW_FIRST
    captions = {(RULES / o.caption).resolve() for o in outs}
    landing = {(RULES / m).resolve() for p in RULES.glob("*.smk") for m in GLOBAL_DESCRIPTION.findall(p.read_text())}
    assert len(landing) == 1, "one global report description (the landing page)"
    assert captions | landing == set((REPO / "workflow" / "report").glob("*.rst")), "a caption file no rule uses"


def test_every_caption_renders_without_a_rest_message():
    outs = report_outputs()
    categories = set(CATEGORIES)
    for o in outs:
        caption = Path(o.caption).name
        _, items = ITEM_WILDCARDS.get(caption, (None, (None,)))
        for item in items:
            body, messages = render_caption(RULES / o.caption, categories=categories, **_item_context(caption, item))
            assert not messages, f"{o.rule_file} {item}: {messages}"
            assert "system-message" not in body and "problematic" not in body, (o.rule_file, item)
            text = re.sub(r"<[^>]+>", " ", body)
            assert len(text.split()) > 20, f"{o.rule_file} {item}: empty caption"
            assert "{{" not in text and "{%" not in text, (o.rule_file, item)


def test_the_landing_page_shows_the_overview_or_says_it_is_missing(tmp_path):
    """With the overview among the report's files its HTML is the landing page's body; without it (a report of a
    few targets) the page names the model, says it is not GPT-2, and names the overview's target."""
    landing = RULES / GLOBAL_DESCRIPTION.search((RULES / "report.smk").read_text()).group(1)
    overview = tmp_path / "run_overview.html"
    overview.write_text('<div class="attncert-overview"><p>Audit: <strong>passed</strong></p></div>')
    body, messages = render_caption(landing, {}, set(CATEGORIES),
                                    files=[SimpleNamespace(name="run_overview.html", path=overview)])
    assert not messages and '<div class="attncert-overview"><p>Audit: <strong>passed</strong>' in body
    for c in CATEGORIES:  # every stage linked from the landing page
        assert f">{c}</a>" in body
    body, messages = render_caption(landing, {}, set(CATEGORIES))
    text = html.unescape(re.sub(r"<[^>]+>", "", body))
    assert not messages and "not GPT-2" in text and "figures/tables/tiny-gpt2/run_overview.md" in text


def test_the_checks_see_the_faults_the_report_had():
    """A |y - t| left unescaped, and categories 'Paper A: x' / 'Paper A: y', are reST messages."""
    bad = REPO / "workflow" / "report" / "minip.rst"
    _, ok = render_caption(bad, {"minip_figure": "transition_rank_by_criterion"}, {"Paper A, x"})
    assert not ok
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"caption_probe_{os.getpid()}.rst"
    try:
        tmp.write_text(bad.read_text().replace("\\|y − t\\|", "|y - t|"))
        _, messages = render_caption(tmp, {"minip_figure": "transition_rank_by_criterion"}, {"Paper A, x"})
        assert "Undefined substitution" in messages
        _, messages = render_caption(RULES / "../report/long_context.rst", {}, {"Paper A: x", "Paper A: y"})
        assert 'Duplicate explicit target name: "paper a"' in messages
    finally:
        tmp.unlink(missing_ok=True)


def embedded_pngs(page: str) -> dict[str, bytes]:
    """{file name: decoded bytes} of every PNG the report embeds as a data URI (Snakemake 9 writes
    data:image/png;charset=utf8;filename=NAME;base64,DATA)."""
    return {name: base64.b64decode(data) for name, data in
            re.findall(r'data:image/png;[^,"]*?filename=([\w.-]+);base64,([A-Za-z0-9+/=]+)', page)}


def embedded_pages(page: str) -> dict[str, str]:
    """{file name: text} of every HTML page the report embeds as a data URI."""
    return {name: base64.b64decode(data).decode() for name, data in
            re.findall(r'data:text/html;[^,"]*?filename=([\w.-]+);base64,([A-Za-z0-9+/=]+)', page)}


@pytest.mark.slow
def test_the_report_of_a_tiny_run_shows_every_figure_and_table(tmp_path, tiny_run):
    wd, cfg = copy_tiny_run(tiny_run, tmp_path / "run")  # the shared run built these figures and pages
    figures = [f"figures/certify/tiny-gpt2/{n}.png" for n in CERTIFY_FIGURES]
    tables = [f"figures/report/tiny-gpt2/{n}.html" for n in ("certification", "certification_slopes")]
    res = run_snakemake(wd, cfg, *figures, *tables, extra=("--report", "report.html"))
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    assert "Duplicate" not in log and "WARNING" not in log.upper().replace("WARNINGS", ""), log[-3000:]
    page = (wd / "report.html").read_text()
    assert "System Message" not in page and "system-message" not in page and "Undefined substitution" not in page
    pngs = embedded_pngs(page)
    for t in figures:  # every figure of the run, embedded byte for byte as a PNG the browser shows
        name = Path(t).name
        assert name in pngs and pngs[name].startswith(PNG_MAGIC), sorted(pngs)
        assert pngs[name] == (wd / t).read_bytes(), name
    pages = embedded_pages(page)
    for t in tables:  # every table page, as the rule wrote it, with the table of the stage's Markdown or CSV
        assert pages[Path(t).name] == (wd / t).read_text() and "<table>" in pages[Path(t).name]
    cert = (wd / "figures/tables/tiny-gpt2/certification.md").read_text().splitlines()[0].removeprefix("# ")
    assert html.escape(cert, quote=False).replace("`attncert audit`", "<code>attncert audit</code>") in \
        pages["certification.html"]
    text = html.unescape(page)
    assert "Relative gap of the first-order" in text and "The whole spread behind the medians" in text
    assert report_index.CERTIFY in text and "relative gap spread" in text  # the category, a figure's label
    assert "attncert: one run, front page" in text and "is not part of this report" in text  # no overview built
    assert "figures/tables/tiny-gpt2/run_overview.md" in text


@pytest.mark.slow
def test_every_table_and_figure_of_the_default_run_is_in_the_report():
    """Against the default DAG's outputs (`snakemake --detailed-summary`, no job run): every PNG under figures/ is
    written by a rule that reports a PNG, every summary table (.md, or a .csv without a Markdown twin) under
    figures/tables/ has its page in the report, and every page's table is an output of the DAG."""
    res = subprocess.run([SNAKEMAKE, "--detailed-summary", "--cores", "1"], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [line.split("\t") for line in res.stdout.splitlines()[1:] if line.startswith("figures/")]
    rule_of = {path: rule for path, _, rule, *_ in rows}
    model = next(p.split("/")[2] for p in rule_of if p.startswith("figures/certify/"))
    grid = next(p.split("/")[2] for p in rule_of if p.startswith("figures/minip/"))
    reporting = {o.rule_file: o for o in report_outputs()}
    rule_files = {rule: p.name for p in RULES.glob("*.smk")
                  for rule in re.findall(r"^rule (\w+):", p.read_text(), re.M)}
    figures = [p for p in rule_of if p.endswith(".png")]
    assert len(figures) == len(CERTIFY_FIGURES) + len(BLOCK_FIGURES) + len(MINIP_FIGURES) + 2
    for png in figures:
        call = reporting.get(rule_files[rule_of[png]])
        assert call is not None and call.name == "png", f"{png} ({rule_of[png]}) is not in the report"
    tables = {p for p in rule_of if p.startswith("figures/tables/") and p.endswith((".md", ".csv"))}
    shown = {table_source(n, model, grid) for n in REPORT_TABLES}
    for t in sorted(tables - {f"figures/tables/{model}/run_overview.md"}):  # the overview: the landing page
        twin = t.removesuffix(".csv") + ".md"
        assert t in shown or (t.endswith(".csv") and twin in tables and twin in shown), f"{t} is not in the report"
    assert shown <= tables, f"pages of tables the DAG does not write: {sorted(shown - tables)}"
    assert {f"figures/report/{model}/{n}.html" for n in REPORT_TABLES} | {
        f"figures/report/{model}/run_overview.html"} == {p for p in rule_of if p.startswith("figures/report/")}
