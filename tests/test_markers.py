"""The markers a maintainer selects by (pyproject.toml registers them; tests/conftest.py
sets them): each test that needs the SSH test hosts, the Slurm cluster or a PostgreSQL
server says so, and the fast tier is marked fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.suiterun import REPO

# Loaded with -p into one collection of the whole suite: every item's file and markers.
LIST_MARKS = """
import json


def pytest_collection_finish(session):
    out = {}
    for item in session.items:
        out.setdefault(item.nodeid.split("::")[0], set()).update(
            m.name for m in item.iter_markers())
    with open(OUT, "w") as f:
        json.dump({k: sorted(v) for k, v in out.items()}, f)
"""


@pytest.fixture(scope="module")
def marks(request, tmp_path_factory) -> dict[str, set[str]]:
    """{test file: the markers of any of its tests}: from this session's own collection
    where it holds every test file (the whole suite, as README's command runs it; each
    xdist worker collects it all), else from a collection of the whole suite."""
    ours: dict[str, set[str]] = {}
    for item in request.session.items:
        ours.setdefault(item.nodeid.split("::")[0], set()).update(
            m.name for m in item.iter_markers())
    on_disk = {str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")}
    if on_disk <= set(ours):
        return ours
    tmp = tmp_path_factory.mktemp("marks")
    (tmp / "list_marks.py").write_text(f"OUT = {str(tmp / 'marks.json')!r}\n" + LIST_MARKS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp), str(REPO), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "pytest", "tests", "--collect-only", "-q",
                          "-p", "no:cacheprovider", "-p", "list_marks"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    return {k: set(v) for k, v in json.loads((tmp / "marks.json").read_text()).items()}


def marked(marks: dict[str, set[str]], marker: str) -> set[str]:
    return {path for path, names in marks.items() if marker in names}


def test_markers_are_registered(pytestconfig):
    # What `pytest --markers` lists beside pytest's own: pyproject.toml's and conftest's.
    registered = {line.split(":")[0].split("(")[0].strip()
                  for line in pytestconfig.getini("markers")}
    for marker in ("fast", "ssh", "slurm", "postgres", "slow"):
        assert marker in registered, marker


def test_the_tests_that_need_a_harness_are_marked_with_it(marks):
    ssh, slurm, postgres = (marked(marks, m) for m in ("ssh", "slurm", "postgres"))
    assert {"tests/test_ssh.py", "tests/test_transport_safety.py"} <= ssh
    assert {"tests/test_slurm.py", "tests/test_slurm_steps.py"} <= slurm <= ssh
    assert {"tests/test_ledger_postgres.py", "tests/fast/test_ledger_cases.py"} <= postgres
    assert "tests/test_inventory.py" not in ssh | slurm | postgres


def test_the_fast_tier_is_marked_fast_and_nothing_else_is(marks):
    fast = marked(marks, "fast")
    assert fast == {p for p in marks if p.startswith("tests/fast/")}
