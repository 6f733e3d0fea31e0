"""The rules' imports at parse time. Every cluster job parses the whole workflow again before it runs
its script, so a heavy import there is paid once per job."""
import re
import subprocess
import sys

from conftest import REPO

HEAVY = ("torch", "matplotlib", "seaborn", "pandas", "scipy", "cvxpy", "transformers")


def test_parsing_the_workflow_imports_no_heavy_library():
    """Every cluster job parses the workflow again: its imports stay light (none of HEAVY)."""
    modules = [m for smk in (REPO / "workflow" / "rules").glob("*.smk")
               for m in re.findall(r"^from (attncert[.\w]*) import", smk.read_text(), re.M)]
    assert modules, "no attncert import found in the rules"
    code = ("import sys\n" + "".join(f"import {m}\n" for m in sorted(set(modules)))
            + f"print(' '.join(sorted(m for m in {HEAVY!r}"
            " if m in sys.modules)))")
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert heavy == [], f"the rules import {heavy} at parse time"
