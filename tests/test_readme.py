"""README's two commands are the contract with a newcomer; CI runs the second exactly."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    return [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]


def test_readme_starts_with_the_suite_and_the_test_command():
    suite, tests = readme_commands()
    assert "pytest suites/" in suite
    assert tests.endswith("pytest tests/")


def test_ci_runs_exactly_the_readme_test_command():
    ci = [ln for ln in (REPO / ".ci" / "run").read_text().splitlines()
          if ln.strip() and not ln.lstrip().startswith("#")]
    assert ci[-1] == readme_commands()[1]


def test_lint_is_clean():
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "burnin", "probes", "suites",
                          "tests", "benchmarks"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
