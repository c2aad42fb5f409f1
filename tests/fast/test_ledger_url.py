"""A ledger URL's secrets are masked wherever it is shown, and a PostgreSQL ledger reached
over TCP without verified TLS is refused unless the inventory accepts it on purpose
(`quarantine.ledger_insecure: true`): a password or a database in the clear is a leak
waiting to happen. burnin/ledger/url.py, the
inventory's key, and the one opener (burnin/ledger/open.py) that applies it."""

from __future__ import annotations

import pytest

from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import LedgerError, LedgerUrlError
from burnin.ledger.open import ledger_site, open_ledger
from burnin.ledger.url import scrub, shown, tls_problem

VERIFIED = "postgresql://burnin@db.example/burnin?sslmode=verify-full&sslrootcert=/etc/ca.crt"


@pytest.mark.parametrize("url, expected", [
    ("postgresql://burnin@db/b?sslmode=verify-full&sslpassword=s3cret",
     "postgresql://burnin@db/b?sslmode=verify-full&sslpassword=***"),
    ("postgresql://burnin:s3cret@db:5433/b", "postgresql://burnin:***@db:5433/b"),
    ("postgresql://burnin@db/b?password=s3cret&sslmode=verify-ca",
     "postgresql://burnin@db/b?password=***&sslmode=verify-ca"),
    ("postgresql://burnin@db/b?passfile=/home/s3cret/.pgpass&application_name=x",
     "postgresql://burnin@db/b?passfile=***&application_name=x"),
    ("postgresql://burnin@db/b?API_TOKEN=s3cret", "postgresql://burnin@db/b?API_TOKEN=***"),
    (VERIFIED, VERIFIED),  # nothing secret: shown whole
])
def test_every_secret_of_a_url_is_masked(url, expected):
    assert shown(url) == expected
    assert "s3cret" not in shown(url)


def test_a_database_s_message_that_quotes_a_secret_is_scrubbed():
    url = "postgresql://burnin@db/b?sslpassword=pass%20phrase-1&sslmode=verify-full"
    said = 'could not decrypt the key with "pass phrase-1"'
    assert scrub(said, url) == 'could not decrypt the key with "***"'
    assert scrub("no secret here", VERIFIED) == "no secret here"


@pytest.mark.parametrize("url", [
    "postgresql://burnin@db.example/burnin",
    "postgresql://burnin@db.example/burnin?sslmode=require",
    "postgresql://burnin@db.example/burnin?sslmode=prefer",
    "postgresql://burnin@10.0.0.5:5432/burnin",
    "postgresql://burnin@[::1]:5432/burnin",
    "postgresql://burnin@/burnin?host=db.example",
    "postgresql://burnin@/burnin?hostaddr=10.0.0.5",
    "postgresql://burnin@/burnin?host=/run/postgresql,db.example",
    "postgresql:///burnin?service=fleet",  # the service file may name any host: unseen here
])
def test_a_tcp_url_without_verified_tls_is_a_problem(url):
    assert "sslmode=verify-full" in tls_problem(url)
    assert "quarantine.ledger_insecure: true" in tls_problem(url)


@pytest.mark.parametrize("url", [
    VERIFIED,
    "postgresql://burnin@db.example/burnin?sslmode=verify-ca",
    "postgresql://burnin@/burnin?host=/run/postgresql",
    "postgresql://burnin@/burnin?host=/run/postgresql&port=5433",
    "postgresql:///burnin",  # libpq's default: the unix socket
])
def test_a_unix_socket_or_a_verified_url_is_fine(url, monkeypatch):
    monkeypatch.delenv("PGHOST", raising=False)
    assert tls_problem(url) == ""


def test_a_url_without_a_host_goes_where_pghost_says(monkeypatch):
    monkeypatch.setenv("PGHOST", "db.example")
    assert tls_problem("postgresql:///burnin") != ""
    monkeypatch.setenv("PGHOST", "/run/postgresql")
    assert tls_problem("postgresql:///burnin") == ""


def inventory(tmp_path, quarantine: str):
    path = tmp_path / "inv.yaml"
    path.write_text(f"version: 1\nnodes:\n  - name: n1\nquarantine:\n{quarantine}")
    return path


def test_the_inventory_refuses_an_unverified_tcp_ledger_naming_the_key_and_the_way_out(
        tmp_path):
    path = inventory(tmp_path, "  ledger: postgresql://burnin@db.example/burnin"
                               "?sslmode=require&sslpassword=s3cret\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    message = str(info.value)
    assert f"{path}:5: quarantine.ledger:" in message
    assert "sslmode=require" in message and "quarantine.ledger_insecure: true" in message
    assert "s3cret" not in message


def test_ledger_insecure_true_accepts_it_and_must_be_a_boolean(tmp_path):
    url = "postgresql://burnin@db.example/burnin"
    inv = load_inventory(inventory(tmp_path, f"  ledger: {url}\n  ledger_insecure: true\n"))
    assert inv.quarantine.ledger == url and inv.quarantine.ledger_insecure is True
    assert load_inventory(inventory(tmp_path, f"  ledger: {VERIFIED}\n")
                          ).quarantine.ledger_insecure is False
    with pytest.raises(InventoryError, match=r"quarantine.ledger_insecure: expected true or "
                                             r"false, got"):
        load_inventory(inventory(tmp_path, f"  ledger: {url}\n  ledger_insecure: 'yes'\n"))


def test_the_opener_refuses_before_connecting_unless_told_insecure():
    url = "postgresql://burnin@127.0.0.1:1/burnin?sslpassword=s3cret"  # nothing listens
    site = ledger_site(None, None, given=url)
    with pytest.raises(LedgerUrlError, match=r"sslpassword=\*\*\*: it reaches the database "
                                             r"over TCP with no sslmode") as refused:
        open_ledger(site)
    assert "s3cret" not in str(refused.value)
    with pytest.raises(LedgerError, match="connection") as tried:
        open_ledger(site, insecure=True)  # accepted: it goes as far as connecting
    assert "s3cret" not in str(tried.value)
