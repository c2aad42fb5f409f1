"""What only PostgreSQL has of the ledger (the behaviour every engine shares runs on it in
tests/fast/test_ledger_cases.py): a migration two controllers race for, a role without
rights, a server that is not there, retried serialization failures."""

from __future__ import annotations

import random
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import pgserver
from support.ledger_replay import contradictions

from burnin.ledger.api import Ledger, LedgerError
from burnin.ledger.backends import SCHEMA_VERSION
from burnin.ledger.postgres import PostgresBackend

pytestmark = pytest.mark.slow



def test_two_controllers_opening_an_old_schema_at_once_migrate_it_once(pg_url):
    """Six openers released at once on a version-1 schema: one applies steps 2 to 4 under
    the advisory lock, the others wait, find it applied, and apply nothing (without the lock
    two would ALTER the table, and one of them fail)."""
    PostgresBackend(pg_url).migrate(upto=1)
    start = threading.Barrier(6)
    applied, errors = [], []

    def opener():
        start.wait()
        try:
            applied.append(PostgresBackend(pg_url).migrate())
        except Exception as e:  # noqa: BLE001  (each opener's outcome is the finding)
            errors.append(e)
    threads = [threading.Thread(target=opener) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert sorted(applied) == [[]] * 5 + [[2, 3, 4, 5]]
    ledger = Ledger(pg_url)
    assert ledger._read(lambda db: db.execute(
        "SELECT version, how FROM ledger_schema ORDER BY version").fetchall()) == [
        (1, "migrated"), (2, "migrated"), (3, "migrated"), (4, "migrated"), (5, "migrated")]
    assert ledger.quarantine_by_hand("n1", "c", "why", "alice") is True


def test_a_newer_schema_is_refused_not_downgraded(pg_url):
    ledger = Ledger(pg_url)
    ledger._write(lambda db: db.execute(
        "INSERT INTO ledger_schema (version, applied, how) VALUES (99, 0, 'future')"))
    with pytest.raises(LedgerError, match=r"schema version 99, newer than this burnin knows "
                                          rf"\({SCHEMA_VERSION}\): upgrade burnin"):
        Ledger(pg_url)


def test_a_server_that_is_not_there_is_a_ledger_error_naming_the_ledger():
    url = f"postgresql://postgres@127.0.0.1:{pgserver.free_port()}/ledger"
    with pytest.raises(LedgerError, match=rf"the quarantine ledger {re.escape(url)}: "
                                          r"connection failed.*refused"):
        Ledger(url)


def test_a_missing_ledger_is_not_created_when_asked_not_to(pg_url):
    with pytest.raises(LedgerError, match="no quarantine ledger at postgresql://"):
        Ledger(pg_url, create=False)
    Ledger(pg_url)
    assert Ledger(pg_url, create=False).entries() == []


def test_a_role_that_may_only_read_reads_and_is_not_ready_to_write(pg_server, pg_url):
    """`burnin admit` may run as a reader; a run as a role that cannot write the ledger
    must stop before any node is touched (preflight calls check_writable)."""
    Ledger(pg_url).record_failure("n1", "c", ["sdc"], ["sdc: x"], {}, "r1")
    database = pg_url.split("/")[3].split("?")[0]
    pg_server.psql("CREATE ROLE reader LOGIN")
    pg_server.psql("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader", database)
    reader = Ledger(pg_server.url(database, user="reader"), create=False)
    assert reader.quarantined() == {"n1"}
    with pytest.raises(LedgerError, match="permission denied for table"):
        reader.check_writable()
    pg_server.psql("GRANT INSERT ON history TO reader", database)
    with pytest.raises(LedgerError, match="permission denied for table quarantine"):
        reader.check_writable()  # history alone is not enough: a run writes both
    pg_server.psql("DROP OWNED BY reader; DROP ROLE reader", database)


def test_concurrent_failures_cleans_and_releases_lose_nothing_and_contradict_nothing(pg_url):
    """Four writers on three nodes at once, each transaction SERIALIZABLE and retried when
    PostgreSQL refuses it: the history replays to the ledger's state (READ COMMITTED
    instead loses clean-run counts or inserts a node twice)."""
    Ledger(pg_url)
    nodes = ["n1", "n2", "n3"]

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        ledger = Ledger(pg_url)
        for i in range(40):
            node, op = rng.choice(nodes), rng.randrange(4)
            if op == 0:
                ledger.record_failures("c", [(n, ["sdc"], [f"sdc: {seed}.{i}"], {})
                                             for n in rng.sample(nodes, 2)], f"r{seed}.{i}")
            elif op == 1:
                ledger.record_clean(node, f"r{seed}.{i}", 3)
            elif op == 2:
                ledger.release(node, "by hand", f"op{seed}")
            else:
                ledger.quarantine_by_hand(node, "c", "hold", f"op{seed}")
    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(writer, seed) for seed in range(4)]:
            f.result(timeout=300)
    assert contradictions(Ledger(pg_url), nodes) == []

