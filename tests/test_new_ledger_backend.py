"""Two seams of the ledger, each one place: a ledger backend is a Backend
subclass and a row of BACKENDS (burnin/ledger/backends.py), chosen by its URL's scheme;
and one function, burnin/ledger/open.py open_ledger, opens the ledger for the plugin and
every command. A throwaway backend declared here, and registered in the table alone, is
used by the inventory's validation, `burnin ledger init`, a run (quarantine and
re-validation), `burnin quarantine`, `burnin history`, `burnin admit` and `burnin ledger
copy`; and no module of burnin but the opener constructs a Ledger."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from support.replay import replay_python
from support.suiterun import REPO, run_suite, script

from burnin import cli
from burnin.inventory.schema import load_inventory
from burnin.ledger import backends as ledger_backends
from burnin.ledger.api import Ledger
from burnin.ledger.backends import LedgerUrlError, SqliteBackend

SCHEME = "scratch"


class ScratchBackend(SqliteBackend):
    """scratch://NAME: an SQLite file NAME.db in ROOT, a ledger only these tests know. It
    counts its openings, so that each command is seen to go through it."""

    example = "scratch://name"
    root: Path = Path("/nonexistent")
    opened: list[str] = []

    def __init__(self, location: str):
        super().__init__(self.root / f"{location.split('://', 1)[1]}.db")
        self.where = location
        ScratchBackend.opened.append(location)

    @classmethod
    def locate(cls, text: str) -> str:
        name = text.split("://", 1)[1]
        if not name.isidentifier():
            raise LedgerUrlError(f"{text!r}: a scratch ledger is scratch://name")
        return text


@pytest.fixture
def scratch(monkeypatch, tmp_path):
    monkeypatch.setitem(ledger_backends.BACKENDS, SCHEME, ScratchBackend)
    monkeypatch.setattr(ScratchBackend, "root", tmp_path / "scratch")
    monkeypatch.setattr(ScratchBackend, "opened", [])
    (tmp_path / "scratch").mkdir()
    return ScratchBackend


def test_a_backend_in_the_table_is_used_everywhere(pytester, scratch, capsys):
    url = f"{SCHEME}://fleet"
    replay = replay_python(pytester.path / "replay")
    script(pytester.path / "py3", "echo 'GPU fell off the bus' >&2\nexit 3\n")
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 0, python: {replay}}}
        nodes:
          - name: n[1-2]
          - name: n3
            python: {pytester.path / 'py3'}
        quarantine: {{ledger: "{url}", release_after: 1}}
        """))
    assert load_inventory(inv).quarantine.ledger == url  # the schema accepts its scheme
    bad = pytester.path / "bad.yaml"
    bad.write_text(inv.read_text().replace(url, f"{SCHEME}://no way"))
    with pytest.raises(Exception, match="a scratch ledger is scratch://name"):
        load_inventory(bad)  # ... and its own validation

    result, _ = run_suite(pytester, inv, "-k", "health")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # never created by a run
    assert f"no quarantine ledger at {url}" in result.stderr.str()
    assert cli.main(["ledger", "init", url]) == 0
    assert (scratch.root / "fleet.db").exists()

    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=2, failed=1)
    assert Ledger(scratch.root / "fleet.db", create=False).quarantined() == {"n3"}
    capsys.readouterr()
    assert cli.main(["quarantine", "--inventory", str(inv), "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["ledger"] == url and [n["node"] for n in listed["nodes"]] == ["n3"]
    assert cli.main(["history", "n3", "--ledger", url]) == 0
    assert "quarantined" in capsys.readouterr().out
    junit = str(reports / "latest" / "junit.xml")
    assert cli.main(["admit", junit, "--inventory", str(inv), "--require", "health",
                     "--json"]) == 1
    assert "in quarantine" in json.loads(capsys.readouterr().out)["rejected"]["n3"][0]
    assert cli.main(["ledger", "copy", url, str(pytester.path / "copy.db")]) == 0

    script(pytester.path / "py3", f'exec {replay} "$@"\n')  # repaired
    result, _ = run_suite(pytester, inv, "-k", "health", "--revalidate")
    result.stdout.fnmatch_lines(["released from quarantine: n3"])
    assert Ledger(scratch.root / "fleet.db", create=False).quarantined() == set()
    assert Ledger(pytester.path / "copy.db", create=False).quarantined() == {"n3"}
    # each went through it: the refused run, init, the run, list, history, admit, copy and
    # the re-validation (a backend the opener skipped would leave one out)
    assert scratch.opened == [url] * 8


def test_no_module_but_the_opener_constructs_a_ledger():
    """Every other part of burnin opens its ledger through open_ledger: what is refused,
    and when one may be created, is decided once."""
    found = []
    for path in sorted((REPO / "burnin").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Ledger":
                found.append(str(path.relative_to(REPO)))
    assert found == ["burnin/ledger/open.py"]
