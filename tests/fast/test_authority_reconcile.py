"""The ledger is the only authority (burnin/gate/reconcile.py, burnin/gate/actions.py): a held
node Slurm has in service is drained with its ledger reason, node-check's drain of a held
node takes the ledger's reason, an administrator's drain and a node not held are left as
they are. Slurm here is a stand-in for scontrol's show and update, answering in scontrol's
own one-line format, so that burnin's parsing of it runs too (tests/test_authority_slurm.py
runs the same against a real slurmctld)."""

from __future__ import annotations

import subprocess

import pytest
from ClusterShell.NodeSet import NodeSet

from burnin.cli import main
from burnin.gate import actions, reconcile
from burnin.ledger.api import Ledger
from burnin.model.drain import NODE_CHECK_PREFIX
from burnin.model.nodes import Inventory, Node, QuarantineSettings
from burnin.transports.slurmctl import SlurmNode

NC = f"{NODE_CHECK_PREFIX} storage: storage.mount /mnt is not mounted"


class FakeSlurm:
    """{node: (State=, Reason=)}; scontrol show node and update nodename=... state=drain."""

    def __init__(self, nodes: dict[str, tuple[str, str]], refuse: set[str] = frozenset()):
        self.nodes = dict(nodes)
        self.refuse = refuse  # nodes whose drain scontrol refuses
        self.updates: list[tuple[str, str]] = []

    def __call__(self, argv, **kw):
        if argv[:3] == ["scontrol", "show", "node"]:
            wanted = set(NodeSet(argv[-1]))
            lines = []
            for name, (state, reason) in sorted(self.nodes.items()):
                if name in wanted:
                    lines.append(f"NodeName={name} Arch=x86_64 CPUTot=2 Gres=(null) "
                                 f"State={state} ThreadsPerCore=1"
                                 + (f" Reason={reason} [root@2026-11-28T03:00:00]"
                                    if reason else ""))
            return subprocess.CompletedProcess(argv, 0 if lines else 1, "\n".join(lines),
                                               "" if lines else "Node not found")
        if argv[:2] == ["scontrol", "update"]:
            name = argv[2].split("=", 1)[1]
            if name in self.refuse:
                return subprocess.CompletedProcess(argv, 1, "", "Invalid node state")
            reason = argv[4].split("=", 1)[1]
            state = self.nodes[name][0].split("+")[0]
            self.nodes[name] = (f"{state}+DRAIN", reason)
            self.updates.append((name, reason))
            return subprocess.CompletedProcess(argv, 0, "", "")
        raise AssertionError(f"not a call this test expects: {argv}")


@pytest.fixture
def slurm(monkeypatch):
    def make(nodes, refuse=frozenset()):
        fake = FakeSlurm(nodes, set(refuse))
        monkeypatch.setattr(subprocess, "run", fake)
        return fake
    return make


def inventory(*names: str, acts=("slurm",), ledger: str | None = None) -> Inventory:
    return Inventory("inv.yaml", "c1", tuple(Node(n, n) for n in names), {},
                     QuarantineSettings(ledger, tuple(acts)))


@pytest.fixture
def ledger(tmp_path):
    db = Ledger(tmp_path / "q.db")
    for node, checks in (("n1", ["sdc"]), ("n2", ["burn"]), ("n3", ["sdc"]), ("n5", ["sdc"])):
        db.record_failure(node, "c1", checks, [f"{checks[0]}: cuda:0 wrong products"], {},
                          "run-1")
    return db


@pytest.mark.parametrize("state,reason,what", [
    ("IDLE", "", reconcile.DRAIN),
    ("ALLOCATED", "", reconcile.DRAIN),
    ("MIXED", "", reconcile.DRAIN),
    ("DOWN+NOT_RESPONDING", "Not responding", reconcile.DRAIN),
    ("IDLE+DRAIN", NC, reconcile.REPLACE),
    ("ALLOCATED+DRAIN", NC, reconcile.REPLACE),
    ("IDLE+DRAIN", "burnin: failed sdc; sdc: cuda:0 wrong", reconcile.HELD),
    ("IDLE+DRAIN", "admin: fan replaced", reconcile.ADMIN),
    ("DOWN+DRAIN", "Kill task failed", reconcile.ADMIN),
])
def test_what_a_held_nodes_slurm_state_calls_for(state, reason, what):
    assert reconcile.decide(SlurmNode("n1", state, reason, 0)) == what
    assert reconcile.decide(None) == reconcile.UNKNOWN


def test_a_held_node_in_service_is_drained_an_administrators_drain_and_a_free_node_are_not(
        ledger, slurm):
    fake = slurm({"n1": ("IDLE", ""), "n2": ("IDLE+DRAIN", "admin: fan replaced"),
                  "n3": ("IDLE+DRAIN", NC), "n4": ("IDLE", ""),
                  "n5": ("IDLE+DRAIN", "burnin: failed sdc; cuda:0 wrong products")})
    done = reconcile.reconcile(inventory("n1", "n2", "n3", "n4", "n5"), ledger, "run-2")
    assert sorted(fake.updates) == [
        ("n1", "burnin: failed sdc; cuda:0 wrong products"),
        ("n3", "burnin: failed sdc; cuda:0 wrong products")]
    assert fake.nodes["n2"] == ("IDLE+DRAIN", "admin: fan replaced")
    assert fake.nodes["n4"] == ("IDLE", "")
    assert [r.node for r in done.drained] == ["n1", "n3"] and not done.failed
    assert done.left == {"n2": "admin: fan replaced"} and done.mismatches == 2
    assert f"in place of {NC!r}" in done.drained[1].message
    assert done.properties() == {"quarantine_reconciled": "2",
                                 "quarantine_not_reconciled": "0",
                                 "quarantine_reconciled_nodes": "n1,n3"}
    assert done.node_properties("n1")["quarantine_reconciled"].startswith("drained: burnin:")
    assert done.node_properties("n2") == {} and done.node_properties("n4") == {}
    for node in ("n1", "n3"):
        last = ledger.history(node)[-1]
        assert (last["event"], last["run_id"]) == ("reconciled", "run-2"), last
        assert ledger.get(node).drained_by_burnin
    assert ledger.history("n2")[-1]["event"] == "quarantined"
    assert not ledger.get("n2").drained_by_burnin
    assert not ledger.history("n4")
    assert [red for _, red in done.lines()] == [True, True]
    # Once drained, nothing is left to do: a timer's next reconcile changes nothing.
    again = reconcile.reconcile(inventory("n1", "n2", "n3", "n4", "n5"), ledger, None)
    assert again.mismatches == 0 and len(fake.updates) == 2


def test_a_drain_that_fails_is_said_and_unmarked(ledger, slurm):
    fake = slurm({"n1": ("IDLE", "")}, refuse={"n1"})
    done = reconcile.reconcile(inventory("n1", "n4"), ledger, "run-2")
    assert [r.node for r in done.failed] == ["n1"] and not done.drained and not fake.updates
    assert done.properties()["quarantine_not_reconciled_nodes"] == "n1"
    assert ledger.history("n1")[-1]["event"] == "reconcile-failed"
    assert not ledger.get("n1").drained_by_burnin  # release will not resume it
    assert "NOT reconciled: n1" in done.lines()[0][0]


def test_nothing_is_reconciled_where_quarantine_does_not_drain_in_slurm(ledger, slurm):
    fake = slurm({"n1": ("IDLE", "")})
    done = reconcile.reconcile(inventory("n1", acts=("command",)), ledger, "run-2")
    assert not done.checked and done.properties() == {} and done.lines() == []
    assert not fake.updates


def test_the_runs_drain_replaces_node_checks_reason_and_leaves_an_administrators(slurm):
    fake = slurm({"n1": ("IDLE+DRAIN", NC), "n2": ("IDLE+DRAIN", "admin: cable"),
                  "n3": ("IDLE+DRAIN", "burnin: failed burn; burn: slow"),
                  "n4": ("DOWN+NOT_RESPONDING", "Not responding")})
    for node in ("n1", "n3", "n4"):
        r = actions.slurm_drain(node, ["sdc"], ["sdc: cuda:0 wrong"])
        assert r.drained and fake.nodes[node][1] == "burnin: failed sdc; cuda:0 wrong"
    r = actions.slurm_drain("n2", ["sdc"], ["sdc: cuda:0 wrong"])
    assert r.ok and not r.drained and fake.nodes["n2"] == ("IDLE+DRAIN", "admin: cable")


@pytest.mark.parametrize("reasons", [["node-check: storage: lost"], [" node-check: x"],
                                     ["node-check:"], ["storage: node-check: x"]])
def test_a_runs_reason_never_reads_as_node_checks(reasons):
    text = actions.drain_reason([], reasons)
    assert text.startswith("burnin:") and not text.startswith(NODE_CHECK_PREFIX), text


def test_reconcile_commands_exit_status(ledger, slurm, tmp_path, capsys):
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\ncluster: c1\ndefaults: {transport: ssh, gpus: 0}\n"
                   "nodes:\n  - {name: \"n[1-4]\"}\n"
                   f"quarantine: {{ledger: {tmp_path / 'q.db'}, actions: [slurm]}}\n")
    fake = slurm({"n1": ("IDLE", ""), "n2": ("IDLE+DRAIN", "admin: fan"), "n3": ("IDLE", ""),
                  "n4": ("IDLE", "")}, refuse={"n3"})
    assert main(["quarantine", "reconcile", "--inventory", str(inv)]) == 1  # n3 refused
    out = capsys.readouterr()
    assert "NOT reconciled: n3" in out.err and "reconciled with the ledger: n1" in out.out
    assert "n2: held, drained by someone else (admin: fan)" in out.out
    fake.refuse = set()
    assert main(["quarantine", "reconcile", "--inventory", str(inv), "--json"]) == 0
    assert '"node": "n3"' in capsys.readouterr().out
    assert main(["quarantine", "reconcile", "--inventory", str(inv)]) == 0  # nothing to do
    assert main(["quarantine", "reconcile", "--ledger", str(tmp_path / "q.db")]) == 2
    assert "--inventory FILE expected" in capsys.readouterr().err
    assert main(["quarantine", "reconcile", "--inventory", str(tmp_path / "none.yaml")]) == 2
    assert fake.nodes["n4"] == ("IDLE", "")
