"""docs/api.md is what docs/api_page.py renders from the docstrings of the objects it lists, and every listed
object has a docstring of its own (a command: a description and `--help` text)."""
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _api_page():
    spec = importlib.util.spec_from_file_location("api_page", REPO / "docs" / "api_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_listed_object_has_a_docstring():
    api = _api_page()
    assert not api.missing_docstrings(), f"listed in docs/api_page.py without a docstring: {api.missing_docstrings()}"


def test_api_page_is_up_to_date():
    api = _api_page()
    assert (REPO / "docs" / "api.md").read_text() == api.render(), \
        "docs/api.md differs from the docstrings; fix: PYTHONPATH=src python docs/api_page.py"


def test_the_page_names_every_listed_object_once():
    api = _api_page()
    text = (REPO / "docs" / "api.md").read_text()
    for e in api.OBJECTS:
        assert text.count(f"`{e.path}`") + text.count(f"`{e.path}(argv)`") == 1, e.path
