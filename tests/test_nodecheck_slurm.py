"""burnin node-check under a real slurmd: as HealthCheckProgram it drains its own node when
the node's storage mount disappears and resumes it once the mount is back, leaving an
administrator's drain alone; as Prolog it keeps a job off a broken node."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.suiterun import junit_cases, run_suite

from burnin.gate import actions
from burnin.ledger.api import Ledger
from burnin.model.nodes import Node
from burnin.transports.slurm import Allocations

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# A hang, not speed: slurmd runs the check every few seconds on a loaded machine.
WAIT_S = 180


def wrapper(path: Path, inventory: Path, conf: Path, mode: str | None) -> Path:
    """The two-line wrapper docs/operator/node-check.md gives (Slurm takes a bare path), with this
    checkout's burnin and the test cluster's slurm.conf."""
    how = f" --mode {mode}" if mode else ""
    path.write_text(f"#!/bin/sh\nSLURM_CONF={conf} PYTHONPATH={ROOT} exec {sys.executable} "
                    f"-m burnin node-check --inventory {inventory}{how}\n")
    path.chmod(0o755)
    return path


def inventory(tmp: Path, names: list[str], mnt: Path, ledger: str | None = None) -> Path:
    doc = {"version": 1, "cluster": "nodecheck",
           "defaults": {"transport": "srun", "gpus": 0,
                        "storage": {"path": str(mnt / "data"), "mount": str(mnt)}},
           # The budget is for a hang; these hosts share two cores with everything else.
           "node_check": {"budget_s": 30, "state_dir": str(tmp / "state" / "{node}")},
           "nodes": [{"name": n, "workdir": str(tmp / "work" / n)} for n in names]}
    if ledger:
        doc["quarantine"] = {"ledger": ledger}
    path = tmp / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def mnt(tmp_path):
    """A tmpfs mounted before the cluster starts, so that every slurmd's mount namespace
    holds it; a test unmounts it inside one node's namespace alone."""
    where = tmp_path / "mnt"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def wait_for(what: str, ready, cluster) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if time.monotonic() > deadline:
            states = {h.name: cluster.state(h.name) for h in cluster.hosts.hosts}
            log = "".join(f"\n--- {f.name}\n{f.read_text(errors='replace')[-2000:]}"
                          for f in sorted((cluster.dir / "log").glob("slurmd*")))
            pytest.fail(f"waiting for {what}: {states}{log}")
        time.sleep(1)


def after_checks(state_dir: Path, count: int, cluster) -> None:
    """Wait until `count` more node-checks have kept their state in `state_dir` (each one
    replaces burnin/nodecheck/state.py's file before it acts on the drain; slurmd runs
    them one after another): `count` - 1 of them have come and gone. Counted, not slept
    for: a loaded machine runs fewer checks in a given time."""
    def mark():
        try:
            st = (state_dir / "node-check.json").stat()
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns
    seen = [mark()]
    deadline = time.monotonic() + WAIT_S
    while len(seen) <= count:
        if time.monotonic() > deadline:
            pytest.fail(f"waiting for {count} node-checks in {state_dir}: saw {len(seen) - 1}; "
                        f"{ {h.name: cluster.state(h.name) for h in cluster.hosts.hosts} }")
        time.sleep(0.1)
        now = mark()
        if now != seen[-1]:
            seen.append(now)


def test_health_check_drains_its_node_resumes_it_and_leaves_an_administrators_drain(
        tmp_path, make_slurm, mnt, pg_url, pytester):
    names = ["h1", "h2", "h3"]
    # A PostgreSQL ledger the nodes reach (its socket): the drain and its lifting are
    # ledger events as well.
    ledger = Ledger(pg_url)
    inv = inventory(tmp_path, names, mnt, ledger=pg_url)
    program = tmp_path / "node-check-health"
    cluster = make_slurm(3, extra_conf=f"HealthCheckProgram={program}\n"
                                       "HealthCheckInterval=3\nHealthCheckNodeState=ANY\n",
                         before_start=lambda c: wrapper(program, inv, c.conf, "health"))
    assert [h.name for h in cluster.hosts.hosts] == names
    cluster.scontrol("update", "nodename=h3", "state=drain", "reason=admin: fan replaced")

    done = cluster.in_node("h1", "umount", str(mnt))
    assert done.returncode == 0, done.stderr
    wait_for("h1 drained by node-check",
             lambda: cluster.state("h1")[1].startswith("burnin: node-check:"), cluster)
    state, reason = cluster.state("h1")
    assert state in ("drained", "draining"), (state, reason)
    assert "storage" in reason and str(mnt) in reason, reason
    assert cluster.state("h2") == ("idle", "")
    assert cluster.state("h3") == ("drained", "admin: fan replaced")
    # The controller's run never lifts node-check's drain (a run that quarantines the node
    # gives it the ledger's reason: tests/test_authority_slurm.py), and reports the node
    # skipped with its reason (SLURM_CONF: the fixture points burnin's scontrol here).
    assert "left drained" in actions.slurm_resume("h1").message
    assert cluster.state("h1")[1] == reason
    held = Allocations([Node(name="h1", address="h1", transport="srun")], "run-1")
    try:
        held.prepare()
        assert held.unavailable["h1"] == f"busy: drained by {reason}"
        assert not held.allocations
    finally:
        held.close()
    # A whole run over it: skipped with node-check's reason, not judged, not quarantined.
    result, reports = run_suite(pytester, inv, "-k", "health", "--nodes", "h1")
    result.assert_outcomes(skipped=1)
    outcome, message = junit_cases(reports)["h1"]["health"]
    assert outcome == "skipped" and f"drained by {reason}" in message, message
    assert not ledger.quarantined()

    done = cluster.in_node("h1", "mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt))
    assert done.returncode == 0, done.stderr
    wait_for("h1 resumed", lambda: cluster.state("h1") == ("idle", ""), cluster)
    # node-check writes the ledger after scontrol answered
    wait_for("the resume in the ledger",
             lambda: ledger.history("h1")[-1]["event"] == "node-check-resumed", cluster)
    events = [(e["event"], e["who"], e["why"]) for e in ledger.history("h1")]
    assert events[0][:2] == ("node-check", "node-check on h1"), events
    assert events[0][2].startswith("storage: storage.mount "), events
    assert events[-1][:2] == ("node-check-resumed", "node-check on h1"), events
    assert f"(was: {reason})" in events[-1][2]
    assert not ledger.history("h2") and not ledger.history("h3")
    # Several more checks on h3, clean ones: an administrator's drain is never lifted.
    after_checks(tmp_path / "state" / "h3", 3, cluster)
    assert cluster.state("h3") == ("drained", "admin: fan replaced")
    assert cluster.state("h2") == ("idle", "")


def test_prolog_keeps_a_job_off_a_broken_node(tmp_path, make_slurm, mnt):
    names = ["h1", "h2"]
    inv = inventory(tmp_path, names, mnt)
    program = tmp_path / "node-check-prolog"
    cluster = make_slurm(2, extra_conf=f"Prolog={program}\n",
                         before_start=lambda c: wrapper(program, inv, c.conf, None))
    done = cluster.in_node("h2", "umount", str(mnt))
    assert done.returncode == 0, done.stderr
    env = cluster.env()
    marks = {n: tmp_path / f"ran-on-{n}" for n in names}
    for n in names:
        res = subprocess.run(["sbatch", "-w", n, "-N1", "-o", "/dev/null", "--wrap",
                              f"touch {marks[n]}"], capture_output=True, text=True, env=env,
                             timeout=60)
        assert res.returncode == 0, res.stderr
    wait_for("the job on h1 to run", marks["h1"].exists, cluster)
    wait_for("h2 drained by Slurm for its prolog", lambda: cluster.state("h2")[0] in (
        "drained", "draining"), cluster)
    state, reason = cluster.state("h2")
    assert "prolog" in reason.lower(), reason
    assert not marks["h2"].exists()
    # The reason node-check gave is in slurmd's log, where Slurm keeps a prolog's output.
    logs = "".join(f.read_text(errors="replace") for f in (cluster.dir / "log").glob("*h2*"))
    assert "burnin: node-check: storage" in logs
    assert os.environ.get("SLURM_SCRIPT_CONTEXT") is None  # the test's own env is untouched


def test_an_xid_drains_once_holds_the_drain_and_an_administrators_resume_stands(
        tmp_path, make_slurm):
    log = tmp_path / "kern.log"
    log.write_text("[    0.000000] Linux version 6.1\n")
    (tmp_path / "data").mkdir()
    doc = {"version": 1, "cluster": "nodecheck",
           "defaults": {"transport": "srun", "gpus": 0, "storage": {"path": str(tmp_path)}},
           "node_check": {"budget_s": 30, "state_dir": str(tmp_path / "state")},
           "nodes": [{"name": "h1", "workdir": str(tmp_path / "work"),
                      "checks": {"health": {"kernel_log": str(log)}}}]}
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump(doc))
    program = tmp_path / "node-check-health"
    cluster = make_slurm(1, extra_conf=f"HealthCheckProgram={program}\n"
                                       "HealthCheckInterval=2\nHealthCheckNodeState=ANY\n",
                         before_start=lambda c: wrapper(program, inv, c.conf, "health"))
    with log.open("a") as f:
        f.write("[  100.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen "
                "off the bus.\n")
    wait_for("h1 drained for the XID",
             lambda: cluster.state("h1")[1].startswith("burnin: node-check: xid:"), cluster)
    reason = cluster.state("h1")[1]
    assert "XID 79" in reason, reason
    # Clean checks follow (the XID was reported once), but an event holds the drain: only a
    # person (or a reboot) lets the node back.
    after_checks(tmp_path / "state", 3, cluster)
    assert cluster.state("h1") == ("drained", reason)
    cluster.scontrol("update", "nodename=h1", "state=resume")
    after_checks(tmp_path / "state", 3, cluster)
    assert cluster.state("h1") == ("idle", "")


def test_epilog_catches_what_the_job_left_and_keeps_the_next_job_off(tmp_path, make_slurm):
    log = tmp_path / "kern.log"
    log.write_text("[    0.000000] Linux version 6.1\n")
    (tmp_path / "data").mkdir()
    doc = {"version": 1, "cluster": "nodecheck",
           "defaults": {"transport": "srun", "gpus": 0,
                        "storage": {"path": str(tmp_path / "data")}},
           "node_check": {"budget_s": 30, "state_dir": str(tmp_path / "state")},
           "nodes": [{"name": "h1", "workdir": str(tmp_path / "work"),
                      "checks": {"health": {"kernel_log": str(log)}}}]}
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump(doc))
    program = tmp_path / "node-check-epilog"
    cluster = make_slurm(1, extra_conf=f"Epilog={program}\n",
                         before_start=lambda c: wrapper(program, inv, c.conf, None))
    # The job "makes" an XID: it writes one where the inventory reads the kernel log.
    line = ("[  100.000000] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE (double bit "
            "error).")
    res = subprocess.run(["sbatch", "-w", "h1", "-N1", "-o", "/dev/null", "--wrap",
                          f"echo '{line}' >> {log}"], capture_output=True, text=True,
                         env=cluster.env(), timeout=60)
    assert res.returncode == 0, res.stderr
    wait_for("h1 drained by Slurm for its epilog",
             lambda: cluster.state("h1")[0] in ("drained", "draining"), cluster)
    assert "epilog" in cluster.state("h1")[1].lower()
    logs = "".join(f.read_text(errors="replace") for f in (cluster.dir / "log").glob("*h1*"))
    assert "burnin: node-check: xid: GPU at PCI 0000:3b:00: XID 48" in logs
