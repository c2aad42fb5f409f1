"""The markers a maintainer selects by (pyproject.toml registers them; tests/conftest.py
sets them): each test that needs the SSH test hosts, the Slurm cluster or a PostgreSQL
server says so, and the fast tier is marked fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.startorder import long_first
from support.suiterun import REPO
from xdist.scheduler.worksteal import WorkStealingScheduling

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
    for marker in ("fast", "ssh", "slurm", "postgres", "slow", "long"):
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


class _Item:
    """A collected test as long_first sees it: its id and whether it is marked long."""

    def __init__(self, nodeid: str, long: bool) -> None:
        self.nodeid, self.long = nodeid, long

    def get_closest_marker(self, name: str):
        return name if name == "long" and self.long else None


class _Worker:
    """A worker as xdist's scheduler drives it: the tests it is sent, in order."""

    shutting_down = False

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_each_worksteal_worker_starts_its_share_with_long_tests(workers):
    """support/startorder.py's long_first (tests/conftest.py applies it) against
    pytest-xdist's own worksteal scheduler: each worker's first tests are long ones, every
    long test is among the first of some worker's, and every test is sent once."""
    # 100 tests, the long ones bunched as the file order bunches them (far into a share).
    items = [_Item(f"t{i}", long=i in (40, 41, 42, 90, 95, 99)) for i in range(100)]
    order = long_first(items, workers)
    config = type("Config", (), {"getvalue": lambda self, name: [f"{workers}*popen"]})()
    sched = WorkStealingScheduling(config)
    nodes = [_Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, [it.nodeid for it in order])
    sched.schedule()
    shares = [[order[i] for i in node.sent] for node in nodes]
    assert sorted(it.nodeid for share in shares for it in share) == sorted(
        it.nodeid for it in items)
    firsts = []
    for share in shares:
        n = next((k for k, it in enumerate(share) if not it.long), len(share))
        assert not any(it.long for it in share[n:]), [it.nodeid for it in share]
        firsts.append(n)
    assert sum(firsts) == 6 and max(firsts) - min(firsts) <= 1, firsts
    # the others keep their order
    rest = [it.nodeid for it in order if not it.long]
    assert rest == [it.nodeid for it in items if not it.long]


def test_a_worksteal_worker_collects_each_share_long_tests_first(request):
    """The wiring: under README's command (-n 3 --dist worksteal) each worker learns the
    controller's --dist (its own reads "no") and orders its collection by long_first, so
    that each share the scheduler cuts from it starts with a long test."""
    workerinput = getattr(request.config, "workerinput", None)
    if workerinput is None:
        pytest.skip("runs on a pytest-xdist worker (README's command)")
    assert workerinput.get("dist") in ("load", "loadscope", "loadfile", "loadgroup",
                                       "worksteal", "each"), workerinput.get("dist")
    items = request.session.items
    if workerinput["dist"] != "worksteal" or len(items) < 1000:
        return  # another scheduler, or a part of the suite: nothing to order
    shares, start = workerinput["workercount"], 0
    for i in range(shares):
        size = (len(items) - start) // (shares - i)
        assert items[start].get_closest_marker("long"), (i, items[start].nodeid)
        start += size
