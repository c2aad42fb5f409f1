"""A secret of the ledger's URL is masked wherever burnin shows it: a parameter whose name
is percent-encoded (libpq decodes `sslp%61ssword` to sslpassword), and the inventory copy
each run keeps in its run directory (burnin/engine/kept_inventory.py)."""

from __future__ import annotations

import pytest

from burnin.engine.kept_inventory import INVENTORY_COPY, keep_inventory
from burnin.inventory.schema import load_inventory
from burnin.ledger.url import MASK, shown

SECRET = "S3CRET"
HOST = "db.example:5432/burnin"


@pytest.mark.parametrize("name", ["sslpassword", "sslp%61ssword", "SSLP%41SSWORD",
                                  "%73%73%6c%70%61%73%73%77%6f%72%64", "pass%66ile"])
def test_a_secret_parameter_is_masked_whatever_the_spelling_of_its_name(name):
    url = f"postgresql://burnin@{HOST}?sslmode=verify-full&{name}={SECRET}&application_name=x"
    got = shown(url)
    assert SECRET not in got, got
    assert f"{name}={MASK}" in got and "application_name=x" in got, got


def test_a_parameter_that_is_no_secret_is_shown():
    url = f"postgresql://burnin@{HOST}?sslmode=verify-full&sslc%65rt=/etc/client.crt"
    assert shown(url) == url


@pytest.mark.parametrize("written", [
    '  ledger: "postgresql://burnin@{host}?sslmode=verify-full&sslp%61ssword={s}"  # kept\n',
    # a URL escaped in the YAML: not its own text in the file, so the copy is written anew
    '  ledger: "postgresql://burnin@{host}?sslmode=verify-full&sslpass\\x77ord={s}"\n',
])
def test_the_kept_inventory_copy_masks_the_ledger_secret_and_keeps_the_settings(
        tmp_path, written):
    inv = tmp_path / "site.yaml"
    inv.write_text("version: 1\ncluster: rack42\ndefaults: {transport: local, gpus: 0}\n"
                   "nodes:\n  - {name: n1}\n"
                   + "checks: {burn: {duration_s: 42}}\nquarantine:\n"
                   + written.format(host=HOST, s=SECRET))
    original = load_inventory(inv)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    keep_inventory(run_dir, inv)
    copy = run_dir / INVENTORY_COPY
    text = copy.read_text()
    assert SECRET not in text, text
    kept = load_inventory(copy)
    assert kept.cluster == original.cluster == "rack42"
    assert [n.name for n in kept.nodes] == [n.name for n in original.nodes]
    assert kept.checks == original.checks and kept.checks
    assert kept.quarantine.ledger == shown(original.quarantine.ledger)
