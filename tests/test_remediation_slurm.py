"""The remediation ladder on a real Slurm test cluster (tests/support/slurmcluster.py):
a held node with a running job is not touched (squeue lists its job), the job keeps
running, and the idle held node gets its step."""

from __future__ import annotations

import json
import stat
import subprocess
import time

import pytest
import yaml
from support.incli import burnin

from burnin.ledger.api import Ledger

pytestmark = pytest.mark.slow


def test_a_held_node_with_a_job_is_skipped_and_its_job_runs_on(make_slurm, tmp_path):
    cluster = make_slurm(2)
    busy, idle = (h.name for h in cluster.hosts.hosts)
    env = cluster.env()
    job = subprocess.run(["sbatch", "-w", busy, "-N1", "--parsable", "-o", "/dev/null",
                          "--wrap", "sleep 300"],
                         capture_output=True, text=True, env=env, timeout=30)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 30
    while subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                         text=True, env=env, timeout=30).stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.5)
    log = tmp_path / "calls.log"
    reset = tmp_path / "nvidia-smi"
    # a reset that does not work: the idle node's ladder goes on to RMA
    reset.write_text(f'#!/bin/sh\necho "reset $2" >> {log}; echo "reset failed" >&2; exit 3\n')
    reset.chmod(reset.stat().st_mode | stat.S_IXUSR)
    inv = cluster.hosts.write_inventory(tmp_path / "inv.yaml")
    doc = yaml.safe_load(inv.read_text())
    doc["quarantine"] = {"ledger": str(tmp_path / "ledger.db"), "actions": ["slurm"]}
    doc["remediation"] = {"ladder": {"ecc": ["reset", "rma"]},
                          "reset_command": [str(reset), "-r", "{node}"],
                          "rma_dir": str(tmp_path / "rma"), "reports": str(tmp_path / "r"),
                          "command_timeout_s": 30}
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    ledger = Ledger(tmp_path / "ledger.db")
    for node in (busy, idle):
        ledger.record_failure(node, "test", ["health"], ["health: GPU 0: row remap failed"],
                              {}, "earlier-run")
        cluster.scontrol("update", f"nodename={node}", "state=drain",
                         "reason=burnin: failed health")

    done = burnin("remediate", "--inventory", str(inv))
    assert done.returncode == 1, done.stdout + done.stderr
    said = {n: [h["why"] for h in ledger.history(n) if h["event"] == "remediation"]
            for n in (busy, idle)}
    assert said[busy] == [f"reset for ecc: skipped; not idle: jobs running: {job_id}"]
    assert log.read_text().split("\n")[:-1] == [f"reset {idle}"]  # never on the busy node
    assert said[idle][0] == "reset for ecc: command failed; exit 3; output: reset failed"
    assert said[idle][1].startswith("rma for ecc: sent; bundle ")
    assert subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                          text=True, env=env, timeout=30).stdout.strip() == "RUNNING"


def test_a_reboot_goes_through_slurms_own_reboot_asap_and_leaves_the_node_drained(
        make_slurm, tmp_path):
    """`scontrol reboot ASAP nextstate=DRAIN`: the real slurmctld drains the node, runs its
    RebootProgram (a stand-in that reboots nothing), and keeps it drained; a node not back
    within command_timeout_s is pending: the next burnin remediate re-validates it once
    Slurm says it is back, and not before."""
    log = tmp_path / "reboot.log"
    program = tmp_path / "reboot-program"
    program.write_text(f'#!/bin/sh\necho "rebooted $(hostname)" >> {log}\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    cluster = make_slurm(1, extra_conf=f"RebootProgram={program}\n")
    node = cluster.hosts.hosts[0].name
    inv = cluster.hosts.write_inventory(tmp_path / "inv.yaml")
    doc = yaml.safe_load(inv.read_text())
    doc["quarantine"] = {"ledger": str(tmp_path / "ledger.db"), "actions": ["slurm"]}
    doc["remediation"] = {"ladder": {"xid": ["reboot", "rma"]}, "reboot": "slurm",
                          "rma_dir": str(tmp_path / "rma"), "reports": str(tmp_path / "r"),
                          "command_timeout_s": 8}
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.record_failure(node, "test", ["health"], ["health: GPU 0: XID 79"], {}, "run-1")
    cluster.scontrol("update", f"nodename={node}", "state=drain", "reason=burnin: failed")

    shown = burnin("remediate", "--inventory", str(inv), "--dry-run")
    assert f"{node}: xid, remediated 0 time(s): reboot -> rma" in shown.stdout
    done = burnin("remediate", "--inventory", str(inv))
    assert done.returncode == 1, done.stdout + done.stderr
    said = [h["why"] for h in ledger.history(node) if h["event"] == "remediation"]
    # not back in time: pending, neither escalated nor re-validated while it reboots
    assert len(said) == 1 and said[0].startswith(
        "reboot for xid: pending; not back from reboot after 8 s (state "), said
    deadline = time.monotonic() + 30
    while not log.exists():  # Slurm ran the node's RebootProgram: the node was idle
        assert time.monotonic() < deadline, "Slurm never rebooted the node"
        time.sleep(0.5)
    state, reason = cluster.state(node)
    assert "drain" in state or "reboot" in state, (state, reason)  # never resumed
    assert ledger.get(node) is not None
    (plan,) = json.loads(burnin("remediate", "--inventory", str(inv), "--dry-run",
                                "--json").stdout)
    assert plan["revalidate_first"] and plan["steps"] == ["rma"]
    again = burnin("remediate", "--inventory", str(inv))
    assert again.returncode == 1 and "still rebooting" in again.stdout, again.stdout
    assert [h["why"] for h in ledger.history(node) if h["event"] == "remediation"] == said
