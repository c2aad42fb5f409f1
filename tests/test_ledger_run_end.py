"""The end of a real run in the ledger, on SQLite and on a
real PostgreSQL: a fault between the run's writes leaves nothing half-done, and the run
says it did not complete; a clean re-validation counts toward release only when it ran
every check the node is in quarantine for."""

from __future__ import annotations

import sqlite3
import textwrap

import pytest
from support.replay import replay_python
from support.suiterun import run_suite, script

from burnin.ledger.api import Ledger

pytestmark = pytest.mark.slow

BROKEN = "echo 'GPU fell off the bus' >&2\nexit 3\n"


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request, pytester) -> str:
    if request.param == "sqlite":
        return str(pytester.path / "ledger.db")
    return request.getfixturevalue("pg_url")


def pair(pytester, where: str, release_after: int = 1) -> str:
    """n1 and n2, each with its own python (`py-n1`, `py-n2`: healthy or broken), and the
    ledger at `where`, created first."""
    replay = replay_python(pytester.path / "replay")
    for n in ("n1", "n2"):
        script(pytester.path / f"py-{n}", f'exec {replay} "$@"\n')
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 0}}
        nodes:
          - name: n1
            python: {pytester.path / 'py-n1'}
          - name: n2
            python: {pytester.path / 'py-n2'}
        quarantine:
          ledger: "{where}"
          release_after: {release_after}
        """))
    Ledger(where)
    return str(inv)


def refuse(where: str, event: str) -> None:
    """Make the database refuse one statement of the run's end: a history row of `event`
    (a trigger, as a constraint or a full disk would refuse it)."""
    if "://" not in where:
        db = sqlite3.connect(where, isolation_level=None)
        db.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON history WHEN NEW.event = "
                   f"'{event}' BEGIN SELECT RAISE(ABORT, 'injected fault'); END")
        db.close()
        return
    import psycopg
    with psycopg.connect(where, autocommit=True) as db:
        db.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                   "$$ BEGIN RAISE EXCEPTION 'injected fault'; END $$")
        db.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON history FOR EACH ROW WHEN "
                   f"(NEW.event = '{event}') EXECUTE FUNCTION refuse()")


def allow(where: str) -> None:
    if "://" not in where:
        db = sqlite3.connect(where, isolation_level=None)
        db.execute("DROP TRIGGER refuse")
        db.close()
        return
    import psycopg
    with psycopg.connect(where, autocommit=True) as db:
        db.execute("DROP TRIGGER refuse ON history")


def kept_runs(ledger: Ledger) -> int:
    return ledger._read(lambda db: db.execute("SELECT count(*) FROM runs").fetchone()[0])


def test_a_fault_between_the_run_s_writes_leaves_nothing_half_done(pytester, where):
    """A re-validation run: n1 is clean (released: release_after 1), n2 fails again, and
    the database refuses n2's failure. Before, n1's release and the kept verdicts were
    committed while the run ended "incomplete, nobody quarantined"."""
    inv = pair(pytester, where)
    ledger = Ledger(where)
    for n in ("n1", "n2"):
        ledger.record_failure(n, "c", ["health"], ["health: GPU fell off"], {}, "r0")
    script(pytester.path / "py-n2", BROKEN)
    before = {n: ledger.history(n) for n in ("n1", "n2")}
    refuse(where, "failed-again")
    result, reports = run_suite(pytester, inv, "-k", "health", "--revalidate")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*the run did not complete: controller fault: *injected "
                                 "fault*nobody was quarantined for it*"])
    assert "released from quarantine" not in result.stdout.str()
    assert ledger.quarantined() == {"n1", "n2"}, "n1 released over a run not recorded"
    assert ledger.get("n1").clean_runs == 0
    assert {n: ledger.history(n) for n in ("n1", "n2")} == before
    assert kept_runs(ledger) == 0, "the run's verdicts kept without its failures"

    allow(where)  # the database takes it again: the same run now goes in whole
    result, _ = run_suite(pytester, inv, "-k", "health", "--revalidate")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["still failing, kept in quarantine: n2",
                                 "released from quarantine: n1"])
    assert ledger.quarantined() == {"n2"} and kept_runs(ledger) == 2


def test_a_failing_action_record_keeps_the_verdicts_and_says_what_was_not_recorded(
        pytester, where):
    """The run's transaction commits; then the record of n2's command hook is refused:
    the quarantine stands, the run completes, and says what the ledger did not take."""
    inv = pair(pytester, where)
    hook = script(pytester.path / "hook.sh", "exit 0\n")
    with open(inv, "a", encoding="utf-8") as f:
        f.write(f"  actions: [command]\n  command: [{hook}, '{{node}}']\n")
    script(pytester.path / "py-n2", BROKEN)
    refuse(where, "action")
    result, reports = run_suite(pytester, inv, "-k", "health")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["quarantined: n2", "command on n2: hook ran",
                                 "not recorded in the ledger: command on n2: hook ran (*"
                                 "injected fault*"])
    ledger = Ledger(where)
    assert ledger.quarantined() == {"n2"}
    assert [h["event"] for h in ledger.history("n2")] == ["quarantined"]


def test_a_clean_revalidation_without_the_failed_check_does_not_count(pytester, where):
    """n1 is in quarantine for sdc. Re-validation runs of health alone pass it, and
    before released it (release_after 1); they do not count now, a run with sdc does."""
    inv = pair(pytester, where)
    ledger = Ledger(where)
    ledger.record_failure("n1", "c", ["sdc"], ["sdc: cuda:3 wrong"], {}, "r0")
    for _ in range(2):
        result, _ = run_suite(pytester, inv, "-k", "health", "--revalidate")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["n1: clean, but not counted toward release: this run "
                                     "did not include sdc, which it is in quarantine for"])
        assert ledger.quarantined() == {"n1"} and ledger.get("n1").clean_runs == 0
    assert [h["event"] for h in ledger.history("n1")] == [
        "quarantined", "not-counted", "not-counted"]
    result, _ = run_suite(pytester, inv, "-k", "health or sdc", "--revalidate")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["released from quarantine: n1"])
    assert ledger.quarantined() == set()
