"""Every reader and writer of the ledger through a postgresql:// quarantine.ledger: the run's
gate (quarantine, skip, re-validation, release), `burnin quarantine`, `burnin admit
--ledger`; and a PostgreSQL ledger that cannot be reached, before or during a run, is the
controller's fault: nobody is quarantined for it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import pgserver
from support.replay import replay_python
from support.requires import need
from support.suiterun import junit_cases, run_suite, script, trio_inventory

from burnin.ledger.api import Ledger

pytestmark = pytest.mark.slow


def inventory(pytester, ledger: str, tail: str = "", init: bool = True) -> str:
    """n1, n2 healthy and n3 (whose python `py3` decides), with `ledger` (created first,
    with `init`, as `burnin ledger init` does)."""
    return str(trio_inventory(pytester, pytester.path / "inv.yaml", tail, ledger=ledger,
                              init=init))


def n3(pytester, body: str) -> None:
    script(pytester.path / "py3", body)


def healthy(pytester) -> str:
    return f'exec {replay_python(pytester.path / "replay")} "$@"\n'


def burnin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burnin", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_run_quarantines_skips_revalidates_and_releases_in_postgresql(pytester, pg_url):
    inv = inventory(pytester, pg_url)
    n3(pytester, "echo 'GPU fell off the bus' >&2\nexit 3\n")
    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=2, failed=1)
    assert Ledger(pg_url).quarantined() == {"n3"}

    listed = burnin("quarantine", "--inventory", inv, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["ledger"] == pg_url
    assert [e["node"] for e in json.loads(listed.stdout)["nodes"]] == ["n3"]
    refused = burnin("admit", str(reports / "latest" / "junit.xml"), "--ledger", pg_url,
                     "--require", "health", "--json")
    assert refused.returncode == 1, refused.stderr
    assert json.loads(refused.stdout)["admitted"] == ["n1", "n2"]
    assert "in quarantine" in json.loads(refused.stdout)["rejected"]["n3"][0]

    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=2)
    assert junit_cases(reports)["n3"]["health"][0] == "skipped"
    n3(pytester, healthy(pytester))  # repaired
    for _ in range(2):
        result, reports = run_suite(pytester, inv, "-k", "health", "--revalidate")
        result.assert_outcomes(passed=1)
    assert Ledger(pg_url).quarantined() == set()
    assert [h["event"] for h in Ledger(pg_url).history("n3")] == [
        "quarantined", "clean", "released"]
    added = burnin("quarantine", "--ledger", pg_url, "add", "n1", "--reason", "fan noise")
    assert added.returncode == 0, added.stderr
    assert Ledger(pg_url).get("n1").by_hand


def test_a_postgresql_ledger_not_reached_stops_the_run_before_any_node(pytester, tmp_path):
    url = f"postgresql://postgres@127.0.0.1:{pgserver.free_port()}/ledger"
    # TCP without TLS, accepted on purpose: what is tested is a server not there
    inv = inventory(pytester, url, "  ledger_insecure: true\n", init=False)
    touched = tmp_path / "touched"
    n3(pytester, f"touch {touched}\n" + healthy(pytester))
    result, _ = run_suite(pytester, inv, "-k", "health")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"cannot open the quarantine ledger: the quarantine ledger {url}: connection " \
           "failed" in result.stderr.str()
    assert not touched.exists()
    admit = burnin("admit", "/nonexistent/junit.xml", "--ledger", url)
    assert admit.returncode == 2


def test_a_postgresql_ledger_lost_during_the_run_ends_it_incomplete(pytester, tmp_path):
    """The database goes away while the probes run (n3's interpreter stops it): the run's
    failures cannot be recorded, so the run ends incomplete (exit 3) and no report of it
    admits anybody; nothing is half-recorded when the database comes back."""
    need(pgserver.missing_requirements())
    with pgserver.PgServer() as server:
        url = server.url(server.create_database())
        inv = inventory(pytester, url)
        stop = " ".join(server._as_owner([str(pgserver.BIN / "pg_ctl"), "-D",
                                          str(server.dir / "data"), "-m", "fast", "-w",
                                          "stop"]))
        n3(pytester, f"{stop} >/dev/null\necho 'GPU fell off the bus' >&2\nexit 3\n")
        result, reports = run_suite(pytester, inv, "-k", "health")
        assert result.ret == pytest.ExitCode.INTERNAL_ERROR, result.stdout.str()[-3000:]
        result.stdout.fnmatch_lines(["*the run did not complete: controller fault: *"])
        admit = burnin("admit", str(reports / "latest" / "junit.xml"))
        assert admit.returncode == 2 and "did not complete" in admit.stderr
        server._run([str(pgserver.BIN / "pg_ctl"), "-D", str(server.dir / "data"), "-l",
                     str(server.dir / "log"), "-w", "start"])
        assert Ledger(url).quarantined() == set() and Ledger(url).history("n3") == []
