"""Two node-checks at once, against a real slurmctld and slurmd: a Prolog whose dcgmi takes
seconds loads the state; meanwhile an XID 79 arrives and the HealthCheckProgram drains for
it; the Prolog then saves. The held event and the cursor survive the Prolog's save, so
the next health check leaves the node drained; a state file gone bad does not let the
drain go either; a person's resume lets it go; an administrator's drain is never
overwritten. node-check runs here as slurmd would run it (root, `--mode health`, the
cluster's scontrol), called by the test at the moments the race needs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_nodecheck import ROOT, kernel_line

from burnin.nodecheck import state

pytestmark = pytest.mark.slow
HANG_S = 60  # a bound for a hang, never for speed


def inventory(tmp: Path, name: str, log: Path, **node_check) -> Path:
    (tmp / "data").mkdir(exist_ok=True)
    doc = {"version": 1, "cluster": "race",
           "defaults": {"transport": "srun", "gpus": 0, "storage": {"path": str(tmp / "data")}},
           "node_check": {"budget_s": 30, "state_dir": str(tmp / "state"), **node_check},
           "checks": {"health": {"kernel_log": str(log)},
                      "fabric": {"sysfs_root": str(tmp / "no-hcas")}},
           "nodes": [{"name": "h1", "workdir": str(tmp / "work")}]}
    path = tmp / name
    path.write_text(yaml.safe_dump(doc))
    return path


def start(inv: Path, cluster, *args: str, env: dict | None = None) -> subprocess.Popen:
    full = {**cluster.env(), "PYTHONPATH": str(ROOT), **(env or {})}
    if "SLURM_SCRIPT_CONTEXT" not in (env or {}):
        full.pop("SLURM_SCRIPT_CONTEXT", None)
    return subprocess.Popen([sys.executable, "-m", "burnin", "node-check", "--inventory",
                             str(inv), "--node", "h1", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full)


def health(inv: Path, cluster) -> str:
    p = start(inv, cluster, "--mode", "health")
    out, err = p.communicate(timeout=HANG_S)
    assert p.returncode == 0, out + err
    return out


def held(tmp: Path) -> list[str]:
    return json.loads((tmp / "state" / state.FILE).read_text())["held"]


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + HANG_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_held_xid_survives_a_prolog_that_loaded_the_state_before_it(tmp_path, make_slurm):
    log = tmp_path / "kern.log"
    log.write_text("[    0.000000] Linux version 6.1\n")
    hc = inventory(tmp_path, "health.yaml", log, dcgm="off")
    started, release = tmp_path / "dcgmi-started", tmp_path / "dcgmi-release"
    dcgmi = tmp_path / "dcgmi"
    dcgmi.write_text(f"#!/bin/sh\ntouch {started}\ni=0\nwhile [ ! -e {release} ] && "
                     f"[ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n"
                     "echo '{\"body\": {\"Overall Health\": {\"value\": \"Healthy\"}}}'\n")
    dcgmi.chmod(0o755)
    # The prolog read the kernel log before the XID (the order): leaving its own
    # read out keeps that order certain on a loaded machine.
    pro = inventory(tmp_path, "prolog.yaml", log, skip=["xid"])
    doc = yaml.safe_load(pro.read_text())
    doc["checks"]["dcgm"] = {"dcgmi": str(dcgmi)}
    pro.write_text(yaml.safe_dump(doc))
    cluster = make_slurm(1)

    health(hc, cluster)
    assert cluster.state("h1") == ("idle", "")
    prolog = start(pro, cluster, env={"SLURM_SCRIPT_CONTEXT": "prolog_slurmd"})
    try:
        wait_for(started)  # the prolog has loaded the state, and waits on its dcgmi
        with log.open("a") as f:
            f.write(kernel_line(100.0, "0000:3b:00", 79, "GPU has fallen off the bus."))
        assert "slurm: drained: burnin: node-check: xid:" in health(hc, cluster)
        release.touch()
        out, err = prolog.communicate(timeout=HANG_S)
    finally:
        prolog.kill()
    assert prolog.returncode == 0, out + err
    kept = json.loads((tmp_path / "state" / state.FILE).read_text())
    assert kept["cursor"] == 100.0, kept  # not the prolog's older cursor
    assert len(kept["held"]) == 1 and "XID 79" in kept["held"][0], kept
    reason = cluster.state("h1")[1]
    out = health(hc, cluster)  # clean, but the event holds the drain
    assert "left drained: 1 event(s) this boot need a person or a reboot" in out, out
    assert cluster.state("h1") == ("drained", reason)

    # A state file gone bad: node-check starts over and still does not let go.
    (tmp_path / "state" / state.FILE).write_text('{"version": 1, "boot_id": "')
    out = health(hc, cluster)
    assert "state: node-check's state is invalid" in out, out
    assert cluster.state("h1")[0] == "drained"
    out = health(hc, cluster)
    assert "left drained: 2 event(s)" in out, out
    assert cluster.state("h1")[0] == "drained"

    # A person resumes the node: the events that held it are let go, and stay let go.
    cluster.scontrol("update", "nodename=h1", "state=resume")
    health(hc, cluster)
    assert held(tmp_path) == []
    assert cluster.state("h1") == ("idle", "")

    # An administrator's drain, then a new XID: node-check never overwrites it.
    cluster.scontrol("update", "nodename=h1", "state=drain", "reason=admin: fan replaced")
    with log.open("a") as f:
        f.write(kernel_line(200.0, "0000:3b:00", 48, "DBE (double bit error)."))
    out = health(hc, cluster)
    assert "left drained by someone else ('admin: fan replaced')" in out, out
    assert cluster.state("h1") == ("drained", "admin: fan replaced")
