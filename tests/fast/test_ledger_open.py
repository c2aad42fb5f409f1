"""burnin/ledger/open.py: which ledger a run or a command opens, and when one may be created
there (a run's first use of the default, or an explicit act), never otherwise."""

from __future__ import annotations

import pytest

from burnin.ledger.api import Ledger, LedgerError, LedgerMissing, LedgerUrlError
from burnin.ledger.open import ledger_site, open_configured, open_ledger
from burnin.model.nodes import QuarantineSettings

TCP = "postgresql://burnin@127.0.0.1:1/burnin"  # unverified TCP, and nothing listens


def test_the_site_is_the_default_only_where_nobody_named_one(tmp_path):
    site = ledger_site(None, tmp_path)
    assert (site.location, site.default) == (tmp_path / "quarantine.db", True)
    for named in (ledger_site(str(tmp_path / "c.db"), tmp_path),
                  ledger_site(None, tmp_path, given=str(tmp_path / "g.db")),
                  ledger_site(str(tmp_path / "c.db"), tmp_path, given=str(tmp_path / "g.db"))):
        assert named.default is False
    assert ledger_site("c.db", tmp_path, given=str(tmp_path / "g.db")).shown == \
        str(tmp_path / "g.db")


def test_a_run_creates_only_the_default_ledger_where_nothing_was(tmp_path):
    default = ledger_site(None, tmp_path)
    with pytest.raises(LedgerMissing):
        open_ledger(default)  # a command: never created
    assert not (tmp_path / "quarantine.db").exists()
    assert open_ledger(default, first_run=True).created
    named = ledger_site(str(tmp_path / "named.db"), tmp_path)
    with pytest.raises(LedgerMissing):
        open_ledger(named, first_run=True)  # configured and missing: refused, even for a run
    assert not (tmp_path / "named.db").exists()
    assert open_ledger(named, create=True).created  # `burnin ledger init`
    assert not open_ledger(named).created


def test_the_configured_ledger_opens_as_the_inventory_says(tmp_path):
    Ledger(tmp_path / "c.db").record_failure("n1", "c", ["sdc"], ["sdc: x"], {}, "r1")
    q = QuarantineSettings(ledger=str(tmp_path / "c.db"))
    assert [e.node for e in open_configured(q, tmp_path / "reports").entries()] == ["n1"]
    with pytest.raises(LedgerMissing):
        open_configured(None, tmp_path / "reports")  # no inventory, no run: never created
    with pytest.raises(LedgerMissing):
        open_configured(None, tmp_path, given=str(tmp_path / "g.db"))
    assert open_configured(None, tmp_path / "reports", first_run=True).created
    missing = QuarantineSettings(ledger=str(tmp_path / "new.db"))
    assert open_configured(missing, tmp_path, create=True).created
    assert (tmp_path / "new.db").exists()


def test_the_inventory_s_ledger_insecure_lets_an_unverified_ledger_be_tried():
    with pytest.raises(LedgerUrlError, match="no sslmode"):
        open_configured(QuarantineSettings(ledger=TCP), None)
    with pytest.raises(LedgerError, match="connection") as tried:
        open_configured(QuarantineSettings(ledger=TCP, ledger_insecure=True), None)
    assert not isinstance(tried.value, LedgerUrlError)
