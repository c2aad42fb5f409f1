"""mypy over burnin/, as pyproject.toml configures it ([tool.mypy]: strict for the bottom
layers, mypy's checks of annotated code elsewhere): README's test command and CI run it
through this test, which fails on any type error."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def mypy(root: Path, cache: Path) -> subprocess.CompletedProcess:
    # Its cache under the test's own directory: never the checkout's, never shared
    # between pytest-xdist workers.
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)],
                          cwd=root, capture_output=True, text=True, timeout=600)


def test_burnin_type_checks(tmp_path):
    res = mypy(REPO, tmp_path / "cache")
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    assert "Success: no issues found" in res.stdout


def test_a_type_error_fails_it(tmp_path):
    """The same configuration over a copy of burnin with one planted error, in a strict
    module and in a module checked by default."""
    shutil.copytree(REPO / "burnin", tmp_path / "burnin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with open(tmp_path / "burnin" / "core" / "safefiles.py", "a") as f:
        f.write("\n\ndef planted(x):\n    return x\n")  # strict: an unannotated def
    with open(tmp_path / "burnin" / "engine" / "run.py", "a") as f:
        f.write("\n\nPLANTED: int = 'a text'\n")
    res = mypy(tmp_path, tmp_path / "cache")
    assert res.returncode == 1, res.stdout
    assert "burnin/core/safefiles.py" in res.stdout and "no-untyped-def" in res.stdout
    assert "burnin/engine/run.py" in res.stdout and "[assignment]" in res.stdout
