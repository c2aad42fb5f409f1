"""The PostgreSQL rights a ledger needs, on a real PostgreSQL: a role
that may write every table but `runs` is stopped by preflight before any node is touched
(it was let through, and the run ended incomplete when it kept its verdicts), and the
GRANTs README gives are enough for the writer and the reader, as README writes them."""

from __future__ import annotations

import pytest
from support import docpages
from support.suiterun import run_suite, script, trio_inventory

from burnin import cli
from burnin.gate.quarantine import settle
from burnin.ledger.api import Ledger, LedgerError
from burnin.model.nodes import Inventory, Node, QuarantineSettings
from burnin.model.outcome import CaseResult

pytestmark = pytest.mark.slow


def readme_grants() -> list[str]:
    """The documentation's GRANT statements (docs/operator/shared-ledger.md), from the one
    ```sql block that holds them, as written there."""
    block = docpages.the_block("sql", "GRANT SELECT ON quarantine, history, runs")
    return [ln.strip() for ln in block.splitlines() if ln.startswith("GRANT ")]


def database(url: str) -> str:
    return url.split("/")[3].split("?")[0]


@pytest.fixture
def roles(pg_server, pg_url):
    """A ledger made by its owner (`burnin ledger init`), and roles to grant to."""
    Ledger(pg_url)
    made = []

    def role(name: str) -> str:
        pg_server.psql(f'CREATE ROLE "{name}" LOGIN')
        made.append(name)
        return pg_server.url(database(pg_url), user=name)
    yield role
    for name in made:
        pg_server.psql(f'DROP OWNED BY "{name}"', database(pg_url))
        pg_server.psql(f'DROP ROLE "{name}"')


def test_a_role_that_may_not_write_runs_is_stopped_before_any_node(pytester, pg_server,
                                                                     pg_url, roles):
    url = roles("no_runs")
    grants = [g.replace("burnin_writer", "no_runs") for g in readme_grants()
              if "burnin_writer" in g and " runs " not in g]
    for grant in grants:
        pg_server.psql(grant, database(pg_url))
    with pytest.raises(LedgerError, match="permission denied for table runs"):
        Ledger(url, create=False).check_writable()
    inv = trio_inventory(pytester, pytester.path / "inv.yaml", ledger=url, init=False)
    touched = pytester.path / "touched"
    script(pytester.path / "py3", f"touch {touched}\n")
    result, _ = run_suite(pytester, inv, "-k", "health")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    assert "cannot write the quarantine ledger" in result.stderr.str()
    assert "permission denied for table runs" in result.stderr.str()
    assert not touched.exists()
    pg_server.psql("GRANT SELECT, INSERT, DELETE ON runs TO no_runs", database(pg_url))
    Ledger(url, create=False).check_writable()


def test_readme_s_grants_are_enough_for_the_writer_and_the_reader(pg_server, pg_url, roles,
                                                                    capsys):
    writer_url, reader_url = roles("burnin_writer"), roles("burnin_reader")
    for grant in readme_grants():
        pg_server.psql(grant, database(pg_url))
    writer = Ledger(writer_url, create=False)
    writer.check_writable()
    inv = Inventory("inv.yaml", "c", (Node("n1", "n1"), Node("n2", "n2")), {},
                    QuarantineSettings(release_after=1))
    writer.record_failure("n1", "c", ["health"], ["health: x"], {}, "r0")
    report = settle(inv, writer, "r1", {
        ("n1", "health"): CaseResult("n1", "health", "passed", ""),
        ("n2", "health"): CaseResult("n2", "health", "failed", "ECC off")}, revalidate=True,
        act=True)
    assert report.released == ["n1"] and report.quarantined == ["n2"]
    writer.quarantine_by_hand("n1", "c", "fan", "ann")
    assert writer.release("n1", "fixed", "ann") is not None
    assert cli.main(["history", "n2", "--ledger", reader_url, "--json"]) == 0
    assert '"outcome": "failed"' in capsys.readouterr().out  # the reader reads `runs`
    assert cli.main(["quarantine", "list", "--ledger", reader_url]) == 0
    with pytest.raises(LedgerError, match="permission denied"):
        Ledger(reader_url, create=False).check_writable()
