"""The remediation ladder on real SSH test hosts (tests/support/testhosts.py), with
stand-in commands: a GPU reset (a stand-in nvidia-smi run on the node over SSH) that
clears a planted ECC fault on one host and not on another, a reboot stand-in on the
controller, a ticket hook, a busy hook. Re-validation is the real `burnin run
--revalidate` of the health check, whose real probe reads the emulated GPUs
(tests/nvmlemu) from each host's scenario file."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import nvmlemu
import pytest
import yaml
from support.incli import burnin

from burnin.ledger.api import Ledger

pytestmark = pytest.mark.slow

H100 = "NVIDIA H100 80GB HBM3"


def gpu(host: str, **over) -> dict:
    return {"name": H100, "uuid": f"GPU-{host}-0", "pci_bus_id": "0000:18:00.0",
            "serial": f"165{len(host)}0000{host[-1]}", **over}


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def setup(tmp: Path, hosts, healing: str) -> tuple[Path, Path]:
    """An inventory of `hosts` whose every GPU has 3 uncorrectable ECC errors; the reset
    stand-in clears them on `healing` alone. Returns (inventory, ledger)."""
    nodes = {}
    for h in hosts:
        scenario = nvmlemu.write_scenario(
            tmp / f"{h.name}.json", {"devices": [gpu(h.name, ecc_errors={
                "uncorrected_volatile": 3, "uncorrected_aggregate": 3})]})
        nvmlemu.write_scenario(tmp / f"{h.name}.clean.json", {"devices": [gpu(h.name)]})
        nodes[h.name] = {"python": nvmlemu.python_wrapper(tmp / f"py-{h.name}", scenario)}
    log = tmp / "calls.log"
    # nvidia-smi -r on a node: clears the volatile counters where the reset heals
    reset = script(tmp / "nvidia-smi", f"""echo "reset $2" >> {log}
if [ "$2" = {healing} ]; then cp {tmp}/$2.clean.json {tmp}/$2.json; fi
echo "GPU 00000000:18:00.0 was successfully reset."
""")
    reboot = script(tmp / "bmc-reboot", f'echo "reboot $1" >> {log}; echo "power cycle $1"\n')
    ticket = script(tmp / "ticket", f'echo "ticket $1 $2" >> {log}; echo "RMA-4711"\n')
    busy = script(tmp / "busy", f'[ -e {tmp}/$1.busy ] && exit 0; exit 1\n')
    inv = hosts.write_inventory(tmp / "inv.yaml", nodes=nodes, gpus=1,
                                gpu_model="H100-SXM5-80GB")
    doc = yaml.safe_load(inv.read_text())
    doc["quarantine"] = {"ledger": str(tmp / "ledger.db"), "release_after": 1}
    doc["remediation"] = {
        "ladder": {"ecc": ["reset", "reboot", "rma"]},
        "reset_command": [reset, "-r", "{node}"], "reboot": "command",
        "reboot_command": [reboot, "{node}"], "ticket_command": [ticket, "{node}", "{bundle}"],
        "busy_command": [busy, "{node}"], "rma_dir": str(tmp / "rma"),
        "reports": str(tmp / "reports"), "command_timeout_s": 60}
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    ledger = Ledger(tmp / "ledger.db")
    for h in hosts:
        ledger.record_failure(h.name, doc["cluster"], ["health"],
                              ["health: GPU 0 (GPU-x): 3 uncorrectable ECC errors"],
                              {}, "run-1")
    return inv, tmp / "ledger.db"


def remediations(ledger: Ledger, node: str) -> list[str]:
    return [h["why"] for h in ledger.history(node) if h["event"] == "remediation"]


def test_a_reset_that_heals_releases_one_that_does_not_escalates_to_rma_a_busy_one_waits(
        tmp_path, make_hosts, finding):
    hosts = make_hosts(3)
    healed, broken, busy = (h.name for h in hosts)
    (tmp_path / f"{busy}.busy").write_text("")
    inv, where = setup(tmp_path, hosts, healing=healed)

    shown = burnin("remediate", "--inventory", str(inv), "--dry-run", "--json")
    assert shown.returncode == 0, shown.stderr
    plans = {p["node"]: p for p in json.loads(shown.stdout)}
    assert plans[healed]["kind"] == "ecc"
    assert plans[healed]["steps"] == ["reset", "reboot", "rma"]
    assert not (tmp_path / "calls.log").exists()  # a dry run runs nothing

    done = burnin("remediate", "--inventory", str(inv))
    assert done.returncode == 1, done.stdout + done.stderr  # some still held
    ledger = Ledger(where)
    calls = (tmp_path / "calls.log").read_text().splitlines()

    # healed: reset on the node, then a real re-validation run released it
    assert ledger.get(healed) is None
    events = [h["event"] for h in ledger.history(healed)]
    assert events[-2:] == ["released", "remediation"], events
    assert remediations(ledger, healed)[0].startswith("reset for ecc: healed; exit 0; "
                                                      "output: GPU 00000000:18:00.0 was")
    assert f"reboot {healed}" not in calls

    # not healed: reset, re-validated (failed again), reboot, re-validated, then RMA
    assert ledger.get(broken) is not None
    said = remediations(ledger, broken)
    assert [s.split(";")[0] for s in said] == ["reset for ecc: not healed",
                                               "reboot for ecc: not healed", "rma for ecc: sent"]
    assert [h["event"] for h in ledger.history(broken)].count("failed-again") == 2
    bundle = tmp_path / "rma" / "nodes" / broken
    assert f"ticket {broken} {bundle}" in calls
    assert "RMA-4711" in said[-1]
    failure = json.loads((bundle / "failure.json").read_text())
    assert failure["kind"] == "ecc" and "uncorrectable" in failure["reasons"][0]
    assert any(h["event"] == "failed-again" for h in
               json.loads((bundle / "history.json").read_text()))
    parts = json.loads((bundle / "parts.json").read_text())
    assert [g["uuid"] for g in parts["gpus"]] == [f"GPU-{broken}-0"]
    assert parts["host"]["boot_id"]

    # busy: nothing ran on it
    assert f"reset {busy}" not in calls and f"reboot {busy}" not in calls
    assert remediations(ledger, busy)[0].startswith("reset for ecc: skipped; not idle")

    # the next plan: the RMA node waits for a person; the busy one gets its reset
    again = {p["node"]: p for p in json.loads(burnin(
        "remediate", "--inventory", str(inv), "--dry-run", "--json").stdout)}
    assert healed not in again
    assert again[broken]["steps"] == [] and "RMA" in again[broken]["why"]
    assert again[busy]["steps"] == ["reset", "reboot", "rma"]
    finding(f"remediation on 3 SSH hosts: {healed} healed by reset, {broken} reset -> reboot "
            f"-> RMA, {busy} skipped busy; calls: {', '.join(calls)}")


def test_a_node_remediated_max_times_for_one_kind_goes_straight_to_rma(tmp_path, make_hosts):
    hosts = make_hosts(1)
    inv, where = setup(tmp_path, hosts, healing="nobody")
    doc = yaml.safe_load(inv.read_text())
    doc["remediation"]["max_remediations"] = 2
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    name = hosts[0].name
    ledger = Ledger(where)
    for step in ("reset", "reboot"):  # two earlier remediations for ecc, each healed then
        ledger.note(name, "remediation", f"{step} for ecc: healed; exit 0")
    (plan,) = json.loads(burnin("remediate", "--inventory", str(inv), "--dry-run",
                                "--json").stdout)
    assert plan["steps"] == ["rma"] and "straight to RMA" in plan["why"]
