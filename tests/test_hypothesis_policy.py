"""Every property test runs under the one hypothesis profile loaded by tests/conftest.py (no deadline), the only
place that sets a deadline."""
import re
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parent


def test_the_profile_has_no_deadline():
    assert settings().deadline is None
    assert settings._current_profile == "attncert"


def test_no_test_sets_its_own_deadline():
    offenders = [
        f"{path.relative_to(TESTS)}:{i}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name not in (Path(__file__).name, "conftest.py")
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bdeadline\s*=", line)
    ]
    assert not offenders, f"set the deadline in the conftest profile only: {offenders}"
