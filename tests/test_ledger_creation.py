"""A ledger is created on purpose, never where one was expected, on a
real PostgreSQL (tests/support/pgserver.py) and on SQLite: a ledger whose tables were dropped (a
failed restore, a recreated or wrong database) is refused by the next run, by `burnin
quarantine list` and by `burnin admit`, and none of them makes it again, so a node held
by hand is never tested, passed and admitted over an emptied ledger. `burnin ledger init`
is the one command that creates one; a run creates only its default one, the first time.
A ledger URL's secrets never reach a message or junit.xml (item 13)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from support import pgserver
from support.replay import replay_python
from support.requires import need
from support.suiterun import REPO, junit_cases, run_suite, script, trio_inventory

from burnin.ledger.api import Ledger

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, pytester) -> str:
    """The test's ledger: a file, or a new database of the session's PostgreSQL."""
    if request.param == "sqlite":
        return str(pytester.path / "ledger.db")
    return request.getfixturevalue("pg_url")


def tables(where: str) -> set[str]:
    """The ledger tables the database holds, read around burnin."""
    names = ("quarantine", "history", "runs", "incidents", "ledger_schema")
    if "://" not in where:
        db = sqlite3.connect(where)
        try:
            return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = "
                                             "'table'")} & set(names)
        finally:
            db.close()
    import psycopg
    with psycopg.connect(where, autocommit=True) as db:
        return {t for t in names
                if db.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0] is not None}


def drop(where: str, names: tuple[str, ...]) -> None:
    """What a failed restore or a wrong database leaves: the ledger's tables gone."""
    if "://" not in where:
        db = sqlite3.connect(where, isolation_level=None)
        try:
            for t in names:
                db.execute(f"DROP TABLE {t}")
        finally:
            db.close()
        return
    import psycopg
    with psycopg.connect(where, autocommit=True) as db:
        db.execute(f"DROP TABLE {', '.join(names)}")


def burnin(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burnin", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("dropped", [
    ("quarantine", "history", "runs", "incidents", "ledger_schema"),
                                     ("quarantine",)], ids=["every-table", "quarantine"])
def test_a_ledger_whose_tables_were_dropped_is_refused_not_recreated(pytester, where,
                                                                      dropped):
    """n3 is held by hand, then the ledger loses its tables. Before the fix, the next run
    recreated them empty, tested n3, passed it, and `burnin admit` admitted it."""
    inv = trio_inventory(pytester, pytester.path / "inv.yaml", ledger=where)
    script(pytester.path / "py3", f'exec {replay_python(pytester.path / "replay")} "$@"\n')
    Ledger(where).quarantine_by_hand("n3", "inv", "PSU under repair", "ann")
    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=2)
    assert junit_cases(reports)["n3"]["health"][0] == "skipped"
    first = (reports / "latest").resolve()

    drop(where, dropped)
    left = tables(where)
    result, reports = run_suite(pytester, inv, "-k", "health")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    said = result.stderr.str()
    assert ("has lost its table(s)" if len(dropped) == 1 else
            "no quarantine ledger at" if "://" in where else "holds no ledger tables") in said
    assert "restore it from a backup" in said.lower()
    assert tables(where) == left, "the run recreated the ledger"
    assert (reports / "latest").resolve() == first, "no run started, no report replaced"

    listed = burnin("quarantine", "--inventory", str(inv), "list")
    assert listed.returncode == 2 and "cannot open the quarantine ledger" in listed.stderr
    assert tables(where) == left, "`burnin quarantine list` recreated the ledger"
    admitted = burnin("admit", str(reports / "latest" / "junit.xml"), "--inventory", str(inv),
                      "--json")
    assert admitted.returncode == 2 and "no node is admitted" in admitted.stderr
    assert tables(where) == left
    plain = burnin("admit", str(reports / "latest" / "junit.xml"), "--json")
    assert plain.returncode == 1 and "n3" in json.loads(plain.stdout)["rejected"], \
        "the held node's last report skipped it: it is not admitted"


def test_quarantine_list_in_an_empty_directory_creates_nothing(tmp_path):
    listed = burnin("quarantine", "list", cwd=tmp_path)
    assert listed.returncode == 2
    assert "no quarantine ledger at reports/quarantine.db: none was ever created there " \
           "(`burnin ledger init reports/quarantine.db` creates one)" in listed.stderr
    assert list(tmp_path.iterdir()) == [], "a command made a ledger (or its directory)"
    history = burnin("history", "n1", cwd=tmp_path)
    assert history.returncode == 2 and list(tmp_path.iterdir()) == []


def test_ledger_init_creates_once_and_refuses_a_lost_one(where, tmp_path):
    made = burnin("ledger", "init", where, "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout) == {"ledger": where, "created": True}
    assert tables(where) == {"quarantine", "history", "runs", "incidents", "ledger_schema"}
    again = burnin("ledger", "init", where)
    assert again.returncode == 0 and "already there, whole; nothing changed" in again.stdout
    Ledger(where).quarantine_by_hand("n1", "c", "held", "ann")
    drop(where, ("runs",))
    lost = burnin("ledger", "init", where)
    assert lost.returncode == 2 and "has lost its table(s) runs" in lost.stderr
    assert "runs" not in tables(where), "init over a lost ledger must not patch it up"


def test_the_first_run_with_no_ledger_configured_creates_the_default_and_guards_it(pytester):
    """README's command 1 on a fresh clone: no quarantine.ledger anywhere, so the run makes
    reports/quarantine.db, says so, and from then on a lost one is refused."""
    replay = replay_python(pytester.path / "replay")
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 0, python: {replay}}}
        nodes:
          - name: n1
        """))
    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"created the quarantine ledger {reports}/quarantine.db *"])
    assert Ledger(reports / "quarantine.db", create=False).entries() == []
    result, _ = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=1)
    assert "created the quarantine ledger" not in result.stdout.str()
    (reports / "quarantine.db").unlink()
    result, _ = run_suite(pytester, inv, "-k", "health")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "quarantine.db is missing, but burnin created one there" in result.stderr.str()
    assert not (reports / "quarantine.db").exists()


def test_a_configured_ledger_that_was_never_created_stops_the_run(pytester, tmp_path):
    ledger = tmp_path / "var" / "quarantine.db"
    inv = trio_inventory(pytester, pytester.path / "inv.yaml", ledger=str(ledger), init=False)
    touched = tmp_path / "touched"
    script(pytester.path / "py3", f"touch {touched}\n")
    result, _ = run_suite(pytester, inv, "-k", "health")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"no quarantine ledger at {ledger}: none was ever created there (`burnin ledger " \
           f"init {ledger}` creates one)" in result.stderr.str()
    assert not ledger.exists() and not ledger.parent.exists() and not touched.exists()


def test_a_secret_in_the_ledger_url_reaches_no_message_and_no_junit(pytester):
    """sslpassword (the client key's passphrase) rides in the URL; the database stops
    during the run, so the run ends incomplete and junit.xml says why: masked."""
    need(pgserver.missing_requirements())
    with pgserver.PgServer() as server:
        url = server.url(server.create_database()) + "&sslpassword=s3cret-passphrase"
        inv = trio_inventory(pytester, pytester.path / "inv.yaml", ledger=url)
        stop = " ".join(server._as_owner([str(pgserver.BIN / "pg_ctl"), "-D",
                                          str(server.dir / "data"), "-m", "fast", "-w",
                                          "stop"]))
        script(pytester.path / "py3", f"{stop} >/dev/null\necho 'GPU fell off' >&2\nexit 3\n")
        result, reports = run_suite(pytester, inv, "-k", "health")
        assert result.ret == pytest.ExitCode.INTERNAL_ERROR, result.stdout.str()[-3000:]
        junit = (reports / "latest" / "junit.xml").read_text()
        assert "controller fault" in junit and "sslpassword=***" in junit
        listed = burnin("quarantine", "--ledger", url, "list")
        assert listed.returncode == 2 and "sslpassword=***" in listed.stderr
        for text in (junit, result.stdout.str(), result.stderr.str(), listed.stderr):
            assert "s3cret" not in text
