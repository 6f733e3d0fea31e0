"""`snakemake --report report.html` builds: every figure is reported as its PNG (the HTML shows it), every caption
path is free of wildcards, every caption renders for every figure of its rule without a reST message, and no two
report categories share a reST target name. The slow test builds the report from a tiny run and opens the HTML."""
import base64
import html
import io
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from docutils.core import publish_parts
from jinja2 import Environment

from attncert.block.figure_names import FIGURE_NAMES as BLOCK_FIGURES
from attncert.certify.figure_names import FIGURE_NAMES as CERTIFY_FIGURES
from attncert.minip.figure_names import FIGURES as MINIP_FIGURES
from conftest import REPO
from test_dag_end_to_end import _snakemake, _workdir

RULES = REPO / "workflow" / "rules"
REPORT_CALL = re.compile(r'(\w+)=report\(\s*(.+?),\s*caption="([^"]+)",\s*category="([^"]+)"\)', re.S)
#: the wildcard that names a rule file's figures, and the figures
FIGURE_WILDCARDS = {"certify.smk": ("certify_figure", CERTIFY_FIGURES), "block.smk": ("block_figure", BLOCK_FIGURES),
                    "minip.smk": ("minip_figure", tuple(MINIP_FIGURES))}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def report_outputs() -> list[tuple[str, str, str, str, str]]:
    """(rule file, output name, path expression, caption path, category) of every `report(...)` output."""
    return [(p.name, *m.groups()) for p in sorted(RULES.glob("*.smk")) for m in REPORT_CALL.finditer(p.read_text())]


def _links(categories) -> str:
    """The link targets Snakemake appends to every caption (snakemake.report: one per category)."""
    return "\n\n" + "\n".join(f".. _{c}: javascript:app.showCategory('x')" for c in sorted(categories)) + "\n"


def render_caption(path: Path, wildcards: dict, categories) -> tuple[str, str]:
    """(HTML body, docutils messages) of one caption as Snakemake renders it: Jinja with `snakemake`, then reST."""
    snakemake = SimpleNamespace(wildcards=SimpleNamespace(**wildcards), config={"model": {"name": "tiny-gpt2"}})
    text = Environment().from_string(path.read_text() + _links(categories)).render(snakemake=snakemake)
    messages = io.StringIO()
    body = publish_parts(text, writer="html", settings_overrides={"warning_stream": messages,
                                                                       "report_level": 2})["body"]
    return body, messages.getvalue()


def test_every_figure_is_reported_as_png_with_a_caption_free_of_wildcards():
    outs = report_outputs()
    assert {f for f, *_ in outs} == {"certify.smk", "block.smk", "minip.smk", "baselines.smk", "long_context.smk"}
    for rule_file, name, path, caption, category in outs:
        assert name == "png" and re.search(r'\.png"\)?$', path), (rule_file, path)
        assert "{" not in caption, f"{rule_file}: caption {caption} holds a wildcard"
        assert (RULES / caption).resolve().is_file(), caption
        assert ":" not in category, f"{rule_file}: a colon ends a reST target name: {category!r}"
    captions = {(RULES / c).resolve() for *_, c, _ in outs}
    assert captions == set((REPO / "workflow" / "report").glob("*.rst")), "a caption file no rule uses"


def test_every_caption_renders_without_a_rest_message():
    outs = report_outputs()
    categories = {cat for *_, cat in outs}
    for rule_file, _, _, caption, _ in outs:
        wildcard, names = FIGURE_WILDCARDS.get(rule_file, (None, (None,)))
        for figure in names:
            body, messages = render_caption(RULES / caption, {wildcard: figure} if wildcard else {}, categories)
            assert not messages, f"{rule_file} {figure}: {messages}"
            assert "system-message" not in body and "problematic" not in body, (rule_file, figure)
            text = re.sub(r"<[^>]+>", " ", body)
            assert len(text.split()) > 20, f"{rule_file} {figure}: empty caption"
            assert "{{" not in text and "{%" not in text, (rule_file, figure)


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


@pytest.mark.slow
def test_the_report_of_a_tiny_run_shows_every_figure(tmp_path, tiny_gpt2_dir):
    wd, cfg = _workdir(tmp_path, tiny_gpt2_dir)
    targets = [f"figures/certify/tiny-gpt2/{n}.png" for n in CERTIFY_FIGURES]
    res = _snakemake(wd, cfg, *targets)
    assert res.returncode == 0, res.stderr[-4000:]
    res = _snakemake(wd, cfg, *targets, extra=("--report", "report.html"))
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    assert "Duplicate" not in log and "WARNING" not in log.upper().replace("WARNINGS", ""), log[-3000:]
    page = (wd / "report.html").read_text()
    assert "System Message" not in page and "system-message" not in page and "Undefined substitution" not in page
    pngs = embedded_pngs(page)
    for t in targets:  # every figure of the run, embedded byte for byte as a PNG the browser shows
        name = Path(t).name
        assert name in pngs and pngs[name].startswith(PNG_MAGIC), sorted(pngs)
        assert pngs[name] == (wd / t).read_bytes(), name
    text = html.unescape(page)
    for n in CERTIFY_FIGURES:
        assert f"{n}.png" in text
    assert "Relative gap of the first-order" in text and "Paper A, certificates" in text
