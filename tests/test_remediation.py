"""The remediation ladder's parts without hosts: the inventory's `remediation:` section,
the kind a held node's reasons show, the plan, fail-closed busy checks, bounded output,
and `burnin remediate`'s exit codes (the ladder end to end: test_remediation_hosts.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.incli import burnin

from burnin.gate import remediation, remediation_steps
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import Ledger
from burnin.model.remediation import kind_of_reasons


def write(tmp: Path, remediation_yaml: str, quarantine: str = "") -> Path:
    inv = tmp / "inv.yaml"
    inv.write_text(f"""version: 1
cluster: c
defaults: {{transport: local, gpus: 0}}
nodes: [{{name: n1, address: n1}}, {{name: n2, address: n2}}]
quarantine: {{ledger: {tmp / 'q.db'}{quarantine}}}
{remediation_yaml}""")
    return inv


ONCE = "remediation.ladder.ecc: expected a list of steps, each once"


@pytest.mark.parametrize("body, error", [
    ("remediation: {ladder: {xid: [reset]}}", "remediation.ladder.xid: expected the last step "
                                              "to be rma"),
    ("remediation: {ladder: {gremlins: [rma]}}", "remediation.ladder.gremlins: unknown kind"),
    ("remediation: {ladder: {ecc: [reset, reset, rma]}}", ONCE),
    ("remediation: {ladder: {ecc: [wipe, rma]}}", ONCE),
    ("remediation: {reboot: command}", "remediation.reboot_command: missing"),
    ("remediation: {reboot: ipmi}", "remediation.reboot: expected one of: auto, slurm, command"),
    ("remediation: {max_remediations: 0}", "remediation.max_remediations: expected an integer"),
    ("remediation: {output_bytes: -1}", "remediation.output_bytes: expected an integer from 0"),
    ("remediation: {sweep: yes}", "remediation.sweep: unknown key"),
])
def test_a_bad_remediation_section_is_refused_with_its_line_and_key(tmp_path, body, error):
    with pytest.raises(InventoryError) as e:
        load_inventory(write(tmp_path, body))
    assert f"inv.yaml:6: {error}" in str(e.value)


@pytest.mark.parametrize("checks, reasons, kind", [
    (("health",), ("health: GPU 2 (GPU-2): XID 79 (fell off the bus)",), "xid"),
    (("health",), ("health: GPU 3 (GPU-3): row remap pending",), "ecc"),
    (("memory",), ("memory: GPU 0: 3 uncorrectable ECC errors",), "ecc"),
    (("health",), ("health: GPU count is 7, most of the run's 4 nodes of this model have 8",),
     "device_count"),
    (("sdc",), ("sdc: GPU 1: wrong result in 2 of 40 GEMMs",), "wrong_result"),
    (("burn",), ("burn: GPU 0: 512 TFLOPS, below 0.9 x 700 TFLOPS",), "slow"),
    (("allreduce_internode",), ("allreduce_internode: 3.1 GB/s, below 0.5 x 40 GB/s",), "link"),
    (("storage",), ("storage: the node is unreachable: no route",), "other"),
    (("fabric",), ("fabric: mlx5_0 port 1: 812 symbol errors during the run",), "link"),
])
def test_the_kind_a_held_nodes_reasons_show(checks, reasons, kind):
    assert kind_of_reasons(checks, reasons, frozenset({"allreduce_internode"})) == kind


def test_a_reason_is_read_only_for_the_kinds_its_check_declares():
    """The check table's failure_kinds bound what a reason's words may mean: a storage
    failure saying "missing" is the lost device storage declares, a fabric one is a link
    whatever its words (fabric declares no such kind), an unknown check any own kind."""
    from burnin.checks import CHECKS
    declared = {name: frozenset(k.name.replace(" ", "_") for k in c.failure_kinds)
                for name, c in CHECKS.items()}
    assert "ecc" not in declared["fabric"] and "xid" not in declared["storage"]
    links = frozenset(n for n, c in CHECKS.items() if c.group)
    # words of ECC in a fabric failure: fabric judges no ECC; its port is the link
    assert kind_of_reasons(("fabric",), ("fabric: mlx5_0 port 1: ECC-like symbol errors",),
                           links, declared) == "link"
    assert kind_of_reasons(("fabric",), ("fabric: mlx5_0 port 1: ECC-like symbol errors",),
                           links) == "ecc"  # without the table: the words alone
    assert kind_of_reasons(("health", "fabric"), ("fabric: port 1 down",
                                                  "health: GPU 0: XID 79"),
                           links, declared) == "xid"


def test_the_plan_follows_the_ladder_skips_steps_the_site_cannot_take_and_ends_at_rma(
        tmp_path):
    inv = load_inventory(write(tmp_path, "remediation: {ladder: {xid: [reset, reboot, rma]}}"))
    ledger = Ledger(tmp_path / "q.db")
    ledger.record_failure("n1", "c", ["health"], ["health: GPU 0: XID 48"], {}, "r1")
    (p,) = remediation.plan(inv, ledger)
    # not on Slurm and no reboot_command: a reboot is not a step this site allows
    assert (p.node, p.kind, p.steps) == ("n1", "xid", ("reset", "rma"))
    ledger.note("n1", "remediation", "reset for xid: not healed; exit 0")
    (p,) = remediation.plan(inv, ledger)
    assert p.steps == ("rma",)  # the reset was taken for this quarantine: next step
    ledger.note("n1", "remediation", "rma for xid: sent; bundle x")
    (p,) = remediation.plan(inv, ledger)
    assert p.steps == () and "waiting for a person" in p.why
    ledger.quarantine_by_hand("n2", "c", "XID 79, the vendor is on it", "ops")
    by_hand = remediation.plan(inv, ledger)[1]
    assert by_hand.node == "n2" and by_hand.steps == () and "by hand" in by_hand.why


def test_busy_is_fail_closed(tmp_path):
    inv = load_inventory(write(tmp_path, "remediation: {}"))
    node = inv.node("n1")
    assert "cannot be told" in remediation_steps.busy(inv, node)  # no hook, no Slurm
    for code, busy in ((0, True), (1, False), (2, True)):
        hooked = load_inventory(write(tmp_path, f"remediation: {{busy_command: [sh, -c, "
                                                f"'exit {code}']}}"))
        assert bool(remediation_steps.busy(hooked, hooked.node("n1"))) is busy, code


def test_a_steps_output_is_bounded_and_made_safe():
    said = remediation_steps.bounded("x" * 5000 + "\x1b[31mdone", 100)
    assert said.startswith("[4912 characters left out] ") and len(said) < 140
    assert "\x1b" not in said and said.endswith("done")


def test_remediate_exit_codes(tmp_path):
    assert burnin("remediate", "--inventory", str(tmp_path / "none.yaml")).returncode == 2
    inv = write(tmp_path, "remediation: {}")
    missing = burnin("remediate", "--inventory", str(inv), "--dry-run")
    assert missing.returncode == 2 and "ledger" in missing.stderr  # never created here
    Ledger(tmp_path / "q.db")
    assert burnin("remediate", "--inventory", str(inv)).returncode == 0  # nobody held
    Ledger(tmp_path / "q.db").record_failure("n2", "c", ["health"], ["health: XID 79"], {},
                                             "r1")
    held = burnin("remediate", "--inventory", str(inv), "--dry-run", "--json")
    assert held.returncode == 0
    assert json.loads(held.stdout)[0]["steps"] == ["reset", "rma"]
    # no busy hook and no Slurm: nothing runs, the node stays held
    done = burnin("remediate", "--inventory", str(inv))
    assert done.returncode == 1 and "not idle" in done.stdout


def test_one_remediate_at_a_time(tmp_path):
    import fcntl
    import os
    inv = write(tmp_path, f"remediation: {{reports: {tmp_path / 'r'}, "
                          f"busy_command: [sh, -c, 'exit 1']}}")
    ledger = Ledger(tmp_path / "q.db")
    ledger.record_failure("n1", "c", ["health"], ["health: XID 79"], {}, "r1")
    (tmp_path / "r").mkdir()
    held = os.open(tmp_path / "r" / "remediate.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        other = burnin("remediate", "--inventory", str(inv))
    finally:
        os.close(held)
    assert other.returncode == 3 and "another burnin remediate" in other.stderr
    assert not [h for h in ledger.history("n1") if h["event"] == "remediation"]


def test_a_reboot_still_pending_is_re_validated_first_then_the_ladder_goes_on(tmp_path):
    """A reboot that was not back (pending) is re-validated before any other step, and
    not taken again; not healed, the ladder goes on to its next step."""
    inv = load_inventory(write(tmp_path, f"remediation: {{busy_command: [sh, -c, 'exit 1'], "
                                         f"rma_dir: {tmp_path / 'rma'}, "
                                         f"reports: {tmp_path / 'r'}}}"))
    ledger = Ledger(tmp_path / "q.db")
    ledger.record_failure("n1", "c", ["health"], ["health: GPU 0: XID 79"], {}, "r1")
    ledger.note("n1", "remediation", "reboot for xid: pending; not back from reboot")
    (p,) = remediation.plan(inv, ledger)
    assert p.revalidate_first and p.steps == ("reset", "rma")
    seen = []

    def revalidate(inv, ledger, node, checks):
        seen.append((node.name, checks))
        return remediation.NOT_HEALED

    (out,) = remediation.run(inv, ledger, tmp_path, "t", revalidate=revalidate,
                             say=lambda _: None)
    said = [h["why"] for h in ledger.history("n1") if h["event"] == "remediation"]
    assert said[1] == ("reboot for xid: not healed; re-validated once the node was back "
                       "from its reboot")
    # the reset ran (`nvidia-smi` is not on this machine: a failed command), then RMA
    assert said[2].startswith("reset for xid: ") and said[3].startswith("rma for xid: sent")
    assert seen[0] == ("n1", ("health",)) and out.result == "rma"


def test_an_rma_directory_that_cannot_be_written_is_said_without_a_traceback(tmp_path):
    (tmp_path / "file").write_text("")
    inv = write(tmp_path, f"remediation: {{rma_dir: {tmp_path / 'file'}, "
                          f"reports: {tmp_path / 'r'}, ladder: {{xid: [rma]}}}}")
    Ledger(tmp_path / "q.db").record_failure("n1", "c", ["health"], ["health: XID 79"], {},
                                             "r1")
    done = burnin("remediate", "--inventory", str(inv))
    assert done.returncode == 2 and done.stderr.startswith("burnin remediate: ")
    assert "Traceback" not in done.stderr and "file" in done.stderr


def test_a_re_validation_without_a_verdict_stops_the_ladder_and_says_why(tmp_path):
    """The real `burnin run --revalidate` finds no test of the held node's checks: no
    verdict, so nothing is proven either way: the node stays held, no further step is
    taken, and the run's own words are in the node's history."""
    inv = write(tmp_path, f"remediation: {{busy_command: [sh, -c, 'exit 1'], "
                          f"reset_command: ['true'], reports: {tmp_path / 'r'}}}")
    ledger = Ledger(tmp_path / "q.db")
    ledger.record_failure("n1", "c", ["gremlin"], ["gremlin: XID 79"], {}, "r1")
    done = burnin("remediate", "--inventory", str(inv))
    assert done.returncode == 1, done.stdout + done.stderr
    events = [(h["event"], h["why"]) for h in ledger.history("n1")][1:]
    assert events[0][0] == "re-validation" and events[0][1].startswith(
        "burnin run exit 5, no verdict on the node: "), events
    assert events[1] == ("remediation", "reset for xid: not re-validated; exit 0")
    assert len(events) == 2 and ledger.get("n1") is not None  # no reboot, no RMA


def test_as_root_a_hook_another_user_could_change_is_refused_before_any_node(tmp_path):
    import os

    from support.requires import need
    need("" if os.geteuid() == 0 else "the root rule needs root")
    ticket = tmp_path / "ticket"
    ticket.write_text("#!/bin/sh\ntouch " + str(tmp_path / "ran") + "\n")
    ticket.chmod(0o777)  # anyone may rewrite what root would run
    inv = write(tmp_path, f"remediation: {{ticket_command: [{ticket}], "
                          f"rma_dir: {tmp_path / 'rma'}, "
                          f"reports: {tmp_path / 'r'}, ladder: {{xid: [rma]}}}}")
    ledger = Ledger(tmp_path / "q.db")
    ledger.record_failure("n1", "c", ["health"], ["health: XID 79"], {}, "r1")
    done = burnin("remediate", "--inventory", str(inv))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"refusing remediation.ticket_command {ticket} as root" in done.stderr
    assert "writable by group or others" in done.stderr
    assert not (tmp_path / "ran").exists()
    assert not [h for h in ledger.history("n1") if h["event"] == "remediation"]
    ticket.chmod(0o755)
    assert burnin("remediate", "--inventory", str(inv)).returncode == 1  # sent to RMA
    assert (tmp_path / "ran").exists()
