"""Fixtures shared by the project's tests."""

from __future__ import annotations

import os
import sys
import tempfile
import types
from contextlib import ExitStack

import hypothesis  # noqa: F401  (see below)
import nvmlemu
import paramiko  # noqa: F401  (see below)
import psycopg  # noqa: F401  (see below)
import pytest
from support import pgserver, slurmcluster
from support.ci_strict import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401
from support.requires import need
from support.testhosts import TestHosts, missing_requirements

# In CI a skipped test, or a module skipped as a whole, is a failure: support.ci_strict's
# hooks, imported above, are this conftest's.

# pytester's in-process runs unload the modules they imported first. cryptography's
# compiled core cannot be loaded twice in one process: imported again after such a run,
# paramiko finds 'AES in CTR mode is not supported'. Importing it here, once for the
# session, keeps it loaded across every inner run. So with psycopg: its compiled core,
# loaded once, would raise the first import's errors, which a second import's
# psycopg.Error no longer catches. And hypothesis: its pytest plugin imports it at the end
# of every inner run, and pytest rewrites the asserts of a plugin's whole distribution as
# it imports it, so each run rewrote and compiled its 80 modules again where no bytecode
# is written (PYTHONDONTWRITEBYTECODE=1): 1.3 to 5 s a run_suite, 0.1 s once loaded here.


# The Python processes the tests start (xdist's workers, the probes, `burnin run`, pytest
# in a subprocess) each import burnin and the tests anew. Where the environment sets
# PYTHONDONTWRITEBYTECODE (this project's machines and CI do), none of them may keep what
# it compiled: each compiled burnin and rewrote pytest's asserts again. Measured in a fresh
# clone, 2026-11-26: tests that start pytest subprocesses took 15 to 30% less CPU with it
# unset (25.5 and 24.5 s against 28.6 and 34.7 s).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_configure(config):
    # Runs take a lock per node under the node's workdir (default ~/.cache/burnin): a
    # session of tests, and each of its xdist workers, gets a home of its own, so that it
    # never meets the developer's real runs, another test session on this machine, or the
    # other worker, over a node both call 'n1'.
    os.environ["HOME"] = tempfile.mkdtemp(prefix="burnin-tests-home-")


# What a test needs, as markers (pyproject.toml registers them): by the fixtures it asks
# for, or by the harness its module imports (a module-level fixture of its own).
NEEDS = {
    "ssh": ({"make_hosts", "make_slurm"}, ("support.testhosts",)),
    "slurm": ({"make_slurm"}, ("support.slurmcluster",)),
    "postgres": ({"pg_server", "pg_url"}, ("support.pgserver",)),
}


def needs_of(item: pytest.Item) -> set[str]:
    """The markers of what `item` needs: fast for the fast tier, ssh, slurm, postgres."""
    out = {"fast"} if "fast" in item.path.parent.parts[-1:] else set()
    module = getattr(item, "module", None)
    imported = {v.__name__ if isinstance(v, types.ModuleType) else getattr(v, "__module__", None)
                for v in vars(module).values()} if module else set()
    for mark, (fixtures, modules) in NEEDS.items():
        if fixtures & set(getattr(item, "fixturenames", ())) or imported & set(modules):
            out.add(mark)
    return out


# The order tests start in, by what they need: a real Slurm, then the SSH hosts, then the
# rest, the fast tier last. pytest-xdist's workers take the collection in order and steal
# from its end; the long tests started first leave the short ones to fill the last minutes
# (in file order the slowest files, test_train* and test_transport_safety, came last and
# ran alone at the end).
START_ORDER = ("slurm", "ssh", "postgres", "", "fast")


def _start_rank(item: pytest.Item) -> int:
    marks = {m.name for m in item.iter_markers()}
    return next((i for i, need in enumerate(START_ORDER) if need in marks),
                START_ORDER.index(""))


def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark in needs_of(item) - {m.name for m in item.iter_markers()}:
            item.add_marker(mark)
    items.sort(key=_start_rank)  # stable: file order within each rank


@pytest.fixture
def make_hosts(tmp_path):
    """make_hosts(n) -> TestHosts: n real SSH hosts, torn down after the test.

    Where they cannot be built (not root, tools missing) the test skips on a developer's
    machine and FAILS in CI, which installs everything they need.
    """
    with ExitStack() as stack:
        made: list[TestHosts] = []

        def make(count: int) -> TestHosts:
            problem = missing_requirements()
            if problem:
                if os.environ.get("CI"):
                    pytest.fail(f"test hosts cannot be built in CI: {problem}")
                pytest.skip(problem)
            made.append(stack.enter_context(TestHosts(count, tmp_path / f"hosts{len(made)}")))
            return made[-1]
        yield make


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL server for the session (each xdist worker its own)."""
    need(pgserver.missing_requirements())
    with pgserver.PgServer() as server:
        yield server


@pytest.fixture
def pg_url(pg_server) -> str:
    """A ledger URL to a new, empty database of the session's PostgreSQL server."""
    return pg_server.url(pg_server.create_database())


# The engines every shared ledger case (tests/fast/test_ledger_cases.py) runs on: an
# SQLite file in the test's directory, and a new database of a real PostgreSQL server.
LEDGER_ENGINES = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=(pytest.mark.postgres, pytest.mark.slow)),
]


@pytest.fixture(params=LEDGER_ENGINES)
def new_ledger(request, tmp_path):
    """A callable opening the test's own ledger on one engine (the same one at every call)."""
    from burnin.ledger.api import Ledger
    where = tmp_path / "q.db" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    return lambda: Ledger(where)


@pytest.fixture
def make_slurm(make_hosts, monkeypatch):
    """make_slurm(n, gpus=0, epilog_s=0) -> SlurmCluster on n new test hosts, each declaring
    `gpus` GPUs as Slurm GRES (and an Epilog of epilog_s seconds, when given); SLURM_CONF
    points at it for the test (and so for burnin's srun and scontrol). Fails in CI when it
    cannot be built."""
    with ExitStack() as stack:
        def make(count: int, gpus: int | dict[str, int] = 0, epilog_s: float = 0,
                 extra_conf: str = "", before_start=None) -> slurmcluster.SlurmCluster:
            problem = slurmcluster.missing_requirements()
            if problem:
                if os.environ.get("CI"):
                    pytest.fail(f"the Slurm test cluster cannot be built in CI: {problem}")
                pytest.skip(problem)
            cluster = slurmcluster.SlurmCluster(make_hosts(count), gpus, epilog_s=epilog_s,
                                                extra_conf=extra_conf)
            if before_start is not None:  # files slurm.conf names, made knowing its path
                before_start(cluster)
            stack.enter_context(cluster)
            monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
            return cluster
        yield make


@pytest.fixture
def nvml(tmp_path, monkeypatch):
    """nvml(**scenario) -> Path: the node's GPUs as tests/nvmlemu describes them, for every
    Python subprocess the test starts afterwards (probes run with `transport: local`): their
    `import pynvml` is the real module, with the emulator in place of libnvidia-ml.so.1.
    Returns the scenario file; nvmlemu.python_wrapper(path, it) makes a `python:` for a node
    that gets no environment (SSH test hosts)."""
    path = tmp_path / "nvml-scenario.json"

    def describe(cuda: str = "all", **scenario):
        # cuda: which of the GPUs torch "sees", each computing on the CPU (nvmlemu.visible);
        # by default every GPU NVML can name, as on a healthy GPU node.
        nvmlemu.write_scenario(path, scenario)
        monkeypatch.setenv("PYTHONPATH",
                           nvmlemu.pythonpath_with_site(os.environ.get("PYTHONPATH")))
        monkeypatch.setenv(nvmlemu.SCENARIO_ENV, str(path))
        monkeypatch.setenv(nvmlemu.CUDA_ENV, nvmlemu.visible(scenario, cuda))
        return path
    return describe


@pytest.fixture
def nvml_in_process():
    """nvml_in_process(**scenario) -> pynvml: the real module, answering from the scenario in
    this process (call its nvmlInit as a probe would); put back as it was after the test,
    which fails if the emulator itself broke on a call."""
    with ExitStack() as stack:
        emulators = []

        def install(**scenario):
            emulators.append(stack.enter_context(nvmlemu.installed(scenario)))
            return emulators[-1].pynvml
        yield install
        broken = [e for emu in emulators for e in emu.internal_errors]
        if broken:
            pytest.fail("the NVML emulator failed inside a call:\n" + "\n".join(broken))


FINDINGS = pytest.StashKey[list]()


@pytest.fixture
def finding(pytestconfig):
    """finding(line): a figure a test measured, printed in the run's summary (CI logs)."""
    return pytestconfig.stash.setdefault(FINDINGS, []).append


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(FINDINGS, [])
    if lines:
        terminalreporter.section("findings")
        for line in lines:
            terminalreporter.write_line(line)
    # A skipped test proved nothing: say so where nobody can miss it.
    skipped = terminalreporter.stats.get("skipped", [])
    if skipped:
        why: dict[str, int] = {}
        for report in skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(
                report.longrepr)
            why[reason] = why.get(reason, 0) + 1
        terminalreporter.section("tests that did NOT run", sep="!", red=True, bold=True)
        terminalreporter.write_line(f"{len(skipped)} test(s) were skipped and proved nothing:",
                                    red=True, bold=True)
        for reason, count in sorted(why.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"  {count} x {reason}", red=True)
