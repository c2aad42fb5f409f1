"""mypy over burnin/, as pyproject.toml configures it ([tool.mypy]: strict for the bottom
layers, mypy's checks of annotated code elsewhere): README's test command and CI run it
through this test, which fails on any type error."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def mypy(root: Path, cache: Path) -> subprocess.CompletedProcess:
    # Its cache under the test's own directory: never the checkout's, never shared
    # between pytest-xdist workers.
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)],
                          cwd=root, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """mypy over the checkout, from a cold cache: its result, and the cache it leaves."""
    cache = tmp_path_factory.mktemp("mypy") / "cache"
    return mypy(REPO, cache), cache


def test_burnin_type_checks(checked):
    res, _ = checked
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    assert "Success: no issues found" in res.stdout


def test_a_type_error_fails_it(tmp_path, checked):
    """The same configuration over a copy of burnin with one planted error, in a strict
    module and in a module checked by default. Each is a new module, and the copy starts
    from the checkout's cache (its files keep their contents and times, and mypy names
    them relative to the root): only what was planted is checked again."""
    shutil.copytree(REPO / "burnin", tmp_path / "burnin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    shutil.copytree(checked[1], tmp_path / "cache")
    # strict (burnin.core.* has --strict's flags): an unannotated def
    (tmp_path / "burnin" / "core" / "planted.py").write_text("def planted(x):\n    return x\n")
    # checked by default: a wrong assignment
    (tmp_path / "burnin" / "engine" / "planted.py").write_text("PLANTED: int = 'a text'\n")
    res = mypy(tmp_path, tmp_path / "cache")
    assert res.returncode == 1, res.stdout
    assert "burnin/core/planted.py" in res.stdout and "no-untyped-def" in res.stdout
    assert "burnin/engine/planted.py" in res.stdout and "[assignment]" in res.stdout
