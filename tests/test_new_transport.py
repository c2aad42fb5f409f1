"""A new transport is its class and its row in one table (burnin/transports/__init__.py:
TABLE), its inventory settings declared there: a throwaway transport declared here, and
added to the table in one place, is accepted by the inventory (its name, its own settings
section with their kinds, defaults and error messages), shown by `burnin inventory`, and
runs a suite's probes, and no other file of burnin knows it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from support.replay import replay_python
from support.suiterun import REPO, SUITES, junit_cases

from burnin import cli
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import Ledger
from burnin.transports import TABLE, transport_for

# Everything about the transport, in one place: what a transport module and its row hold.
PIGEON = '''
from dataclasses import dataclass
from pathlib import Path

from burnin.transports import TABLE, TransportRow, setting
from burnin.transports.local import LocalTransport


@dataclass(frozen=True)
class PigeonSettings:
    """`pigeon:` under defaults or a node."""

    loft: str = setting("str", "/nonexistent", shown=True)
    wings: float = setting("positive", 2.0)


class PigeonTransport(LocalTransport):
    """Carries the probe the local way, and leaves a feather in its loft each time."""

    def run(self, argv, stdin, *args, **kwargs):
        loft = Path(self.node.pigeon.loft)
        (loft / f"{self.node.name}.{len(list(loft.iterdir()))}").write_text(str(argv))
        return super().run(argv, stdin, *args, **kwargs)


TABLE["pigeon"] = TransportRow(PigeonTransport, settings=PigeonSettings)
'''


@pytest.fixture()
def pigeon(monkeypatch):
    monkeypatch.setitem(TABLE, "pigeon", TABLE["local"])  # undone after the test
    exec(compile(PIGEON, "pigeon_plugin", "exec"), {})  # noqa: S102  (the text above)


def inventory(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text("version: 1\n" + textwrap.dedent(body))
    return path


def test_the_inventory_takes_its_name_and_its_settings(tmp_path, pigeon):
    inv = load_inventory(inventory(tmp_path, """\
        defaults: {transport: pigeon, pigeon: {loft: /srv/loft}}
        nodes:
          - name: p1
          - name: p2
            pigeon: {wings: 4}
          - name: s1
            transport: ssh
        """))
    p1, p2, s1 = inv.nodes
    assert (p1.transport, p1.pigeon.loft, p1.pigeon.wings) == ("pigeon", "/srv/loft", 2.0)
    assert (p2.pigeon.loft, p2.pigeon.wings) == ("/srv/loft", 4)
    assert s1.ssh.port == 22 and s1.pigeon.loft == "/srv/loft"


def test_the_inventory_says_what_is_wrong_with_them(tmp_path, pigeon):
    with pytest.raises(InventoryError) as e:
        load_inventory(inventory(tmp_path, """\
            defaults: {transport: pidgin, pigeon: {wings: -1, feathers: 3}}
            nodes: [{name: p1}]
            """))
    text = str(e.value)
    assert "defaults.transport: expected one of: ssh, srun, local, pigeon, got str 'pidgin'" \
        in text
    assert "defaults.pigeon.wings: expected a number above 0, got int -1" in text
    assert "defaults.pigeon.feathers: unknown key; expected one of: loft, wings" in text


def test_burnin_inventory_shows_its_settings(tmp_path, pigeon, capsys):
    path = inventory(tmp_path, """\
        defaults: {transport: pigeon, pigeon: {loft: /srv/loft}}
        nodes: [{name: p1}]
        """)
    assert cli.main(["inventory", "check", str(path), "--json"]) == 0
    node = json.loads(capsys.readouterr().out)["nodes"][0]
    assert (node["transport"], node["pigeon"]) == ("pigeon", {"loft": "/srv/loft"})


def test_the_run_makes_its_transport(tmp_path, pigeon):
    inv = load_inventory(inventory(tmp_path, """\
        defaults: {transport: pigeon}
        nodes: [{name: p1}]
        """))
    assert type(transport_for(inv.nodes[0], tmp_path)).__name__ == "PigeonTransport"


def test_a_suite_runs_its_probes_through_it(pytester):
    pytester.makepyfile(pigeon_plugin=PIGEON)
    loft = pytester.path / "loft"
    loft.mkdir()
    replay = replay_python(pytester.path / "replay")
    inv = pytester.path / "inv.yaml"
    inv.write_text(f"version: 1\ndefaults: {{transport: pigeon, gpus: 0, python: {replay},"
                   f" pigeon: {{loft: {loft}}}}}\nnodes:\n  - name: n[1-2]\nquarantine:\n"
                   f"  ledger: {pytester.path / 'ledger.db'}\n")
    Ledger(pytester.path / "ledger.db")  # made on purpose, as `burnin ledger init` does
    reports = pytester.path / "reports"
    result = pytester.runpytest_subprocess(
        SUITES, "--inventory", str(inv), "--reports", str(reports), "-p", "no:cacheprovider",
        "-p", "pigeon_plugin", "-k", "health", timeout=600)
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert {n: c["health"][0] for n, c in junit_cases(reports).items()} == {
        "n1": "passed", "n2": "passed"}
    assert {p.name.split(".")[0] for p in loft.iterdir()} == {"n1", "n2"}


def test_no_file_of_burnin_names_it():
    assert not [p for p in (REPO / "burnin").rglob("*.py") if "pigeon" in p.read_text()]
