"""burnin node-check on this machine, as a real process: each finding it reports, its modes
and exit statuses, its time budget against a check made to hang, its cursor (an XID
reported once), and what it imports. GPUs through the NVML emulator (tests/nvmlemu), HCAs
through a sysfs tree of the test's own (no HCA exists here), DCGM through a dcgmi of the
test's own (no DCGM here); storage, host and the kernel log are this machine's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
HANG_S = 60  # a bound for a hang, never for speed


def make_inventory(tmp: Path, node: dict | None = None, node_check: dict | None = None,
                   checks: dict | None = None, name: str | None = None) -> Path:
    (tmp / "data").mkdir(exist_ok=True)
    (tmp / "work").mkdir(exist_ok=True)
    entry = {"name": name or socket.gethostname(), "gpus": 0, "workdir": str(tmp / "work"),
             "storage": {"path": str(tmp / "data")}, **(node or {})}
    doc = {"version": 1, "cluster": "nc", "defaults": {"transport": "local"},
           "node_check": {"budget_s": 30, "state_dir": str(tmp / "state"),
                          **(node_check or {})}, "nodes": [entry]}
    # This machine's own HCAs (if it has any) are not the test's: an empty sysfs tree
    # unless the test brings one.
    doc["checks"] = {"fabric": {"sysfs_root": str(tmp / "no-hcas")}, **(checks or {})}
    path = tmp / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def node_check(inv: Path, *args: str, env: dict | None = None,
               python_args: tuple = ()) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **(env or {})}
    full.pop("SLURM_SCRIPT_CONTEXT", None) if "SLURM_SCRIPT_CONTEXT" not in (env or {}) \
        else None
    return subprocess.run([sys.executable, *python_args, "-m", "burnin", "node-check",
                           "--inventory", str(inv), *args], capture_output=True, text=True,
                          env=full, timeout=HANG_S)


def findings(res: subprocess.CompletedProcess) -> list[str]:
    doc = json.loads(res.stdout)
    return [f"{c['check']}: {f['text']}" for c in doc["checks"] for f in c["findings"]
            if not f["warn"]]


def test_a_clean_node_passes_and_says_what_ran(tmp_path):
    res = node_check(make_inventory(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert ": ok in " in res.stdout and "[xid, fabric, storage, host]" in res.stdout


def test_storage_path_missing_not_on_its_mount_and_mount_gone(tmp_path):
    gone = tmp_path / "no" / "such"
    res = node_check(make_inventory(tmp_path, {"storage": {"path": str(gone)}}), "--json")
    assert res.returncode == 1
    assert findings(res) == [f"storage: storage.path {gone} does not exist (or is not a "
                             "directory)"]
    # /proc is a mount point; tmp_path is not on it
    res = node_check(make_inventory(tmp_path, {"storage": {"path": str(tmp_path / "data"),
                                                           "mount": "/proc"}}), "--json")
    assert findings(res) == [f"storage: storage.path {tmp_path / 'data'} is not on "
                             "storage.mount /proc"]
    res = node_check(make_inventory(tmp_path, {"storage": {"path": str(tmp_path / "data"),
                                                           "mount": str(tmp_path)}}), "--json")
    assert findings(res) == [f"storage: storage.mount {tmp_path} is not a mount point (not "
                             "mounted)"]


def test_host_findings_cpus_memory_edac_and_a_full_file_system(tmp_path):
    edac = tmp_path / "sys" / "devices" / "system" / "edac" / "mc" / "mc0"
    edac.mkdir(parents=True)
    (edac / "ce_count").write_text("0\n")
    (edac / "ue_count").write_text("2\n")
    checks = {"health": {"cpus": 4096, "memory_gib": 100000, "sysfs_root": str(tmp_path / "sys")}}
    res = node_check(make_inventory(tmp_path, checks=checks,
                                    node_check={"min_free_gib": 1e9}), "--json")
    assert res.returncode == 1
    got = findings(res)
    assert any(f.startswith("host: ") and "CPUs, the settings declare 4096" in f for f in got)
    assert any("GiB, the settings declare 100000 GiB" in f for f in got)
    assert "host: EDAC mc0: 2 uncorrected memory errors since boot" in got
    assert any(f.startswith("host: root file system (/) has ") and "below 1e+09 GiB" in f
               for f in got)
    assert any(f.startswith(f"host: workdir file system ({tmp_path / 'work'})") for f in got)


def ib_port(root: Path, hca: str, port: str, state: str, phys: str, rate: str) -> None:
    d = root / hca / "ports" / port
    d.mkdir(parents=True)
    (d / "state").write_text(state + "\n")
    (d / "phys_state").write_text(phys + "\n")
    (d / "rate").write_text(rate + "\n")


def test_fabric_hca_missing_port_down_and_below_its_rate(tmp_path):
    root = tmp_path / "ib"
    ib_port(root, "mlx5_0", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)")
    ib_port(root, "mlx5_1", "1", "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)")
    ib_port(root, "mlx5_2", "1", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")
    inv = make_inventory(tmp_path, {"hcas": 4}, checks={"fabric": {
        "sysfs_root": str(root), "rate_gbps": 400}})
    res = node_check(inv, "--json")
    assert res.returncode == 1
    assert findings(res) == [
        "fabric: 3 HCAs (mlx5_0, mlx5_1, mlx5_2), inventory says 4",
        "fabric: mlx5_1 port 1: state DOWN, physical state Disabled, expected ACTIVE and LinkUp",
        "fabric: mlx5_2 port 1: rate 200 Gb/sec (4X HDR), below 400 Gb/s "
        "(checks.fabric.rate_gbps)"]


def dcgmi(tmp: Path, overall: str, code: int = 0) -> Path:
    path = tmp / "dcgmi"
    doc = {"body": {"Overall Health": {"value": overall}, "GPU": {"children": {}}}}
    path.write_text(f"#!/bin/sh\necho '{json.dumps(doc)}'\nexit {code}\n")
    path.chmod(0o755)
    return path


def test_dcgm_health_failure_fails_warning_warns_and_no_verdict_fails(tmp_path):
    for overall, code, expect in (("Failure", 0, 1), ("Warning", 0, 0), ("Healthy", 0, 0),
                                  ("", 5, 1)):
        inv = make_inventory(tmp_path, checks={"dcgm": {"dcgmi": str(dcgmi(tmp_path, overall,
                                                                             code))}})
        res = node_check(inv, "--json")
        assert res.returncode == expect, (overall, res.stdout)
        doc = json.loads(res.stdout)
        assert [c["check"] for c in doc["checks"]][-1] == "dcgm"
        if overall == "Failure":
            assert findings(res) == ["dcgm: dcgmi health -c: overall health failure"]
    res = node_check(make_inventory(tmp_path, node_check={"dcgm": "off"},
                                    checks={"dcgm": {"dcgmi": str(dcgmi(tmp_path, "Failure"))}}))
    assert res.returncode == 0 and "dcgm" not in res.stdout


def kernel_line(t: float, pci: str, code: int, text: str) -> str:
    return f"[{t:12.6f}] NVRM: Xid (PCI:{pci}): {code}, pid=1234, name=python, {text}\n"


def test_an_xid_is_reported_once_then_a_new_one_again(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("[    0.000000] Linux version 6.1\n"
                   + kernel_line(100.5, "0000:3b:00", 79, "GPU has fallen off the bus."))
    inv = make_inventory(tmp_path, checks={"health": {"kernel_log": str(log)}})
    first = node_check(inv, "--json")
    assert first.returncode == 1
    assert len(findings(first)) == 1
    assert findings(first)[0].startswith("xid: GPU at PCI 0000:3b:00: XID 79 (GPU has fallen "
                                         "off the bus)")
    again = node_check(inv, "--json")
    assert again.returncode == 0, again.stdout  # the same XID: reported once
    with log.open("a") as f:
        f.write(kernel_line(250.0, "0000:5e:00", 48, "DBE (double bit error)."))
    third = node_check(inv, "--json")
    assert third.returncode == 1
    assert [f.split(" (")[0] for f in findings(third)] == ["xid: GPU at PCI 0000:5e:00: XID 48"]
    # The held event: a drain for it is not lifted by a clean check in this boot.
    state = json.loads((tmp_path / "state" / "node-check.json").read_text())
    assert len(state["held"]) == 2 and state["cursor"] == 250.0


def test_a_check_made_to_hang_is_reported_within_the_budget(tmp_path):
    fifo = tmp_path / "kernel-log-that-never-ends"
    os.mkfifo(fifo)  # opening it for reading waits for a writer that never comes
    inv = make_inventory(tmp_path, node_check={"budget_s": 2},
                         checks={"health": {"kernel_log": str(fifo)}})
    started = time.monotonic()
    res = node_check(inv, "--json")
    took = time.monotonic() - started
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    xid = next(c for c in doc["checks"] if c["check"] == "xid")
    assert xid["finished"] is False
    assert xid["findings"][0]["text"].startswith("did not finish within its time budget")
    assert xid["findings"][0]["text"].endswith("(node_check.budget_s 2 s)")
    # the other checks finished and reported, and the process did not wait on the hung one
    assert all(c["finished"] for c in doc["checks"] if c["check"] != "xid")
    assert doc["elapsed_s"] < 2.5
    assert took < HANG_S


def test_prolog_and_epilog_put_the_reason_on_stderr_and_exit_1(tmp_path):
    inv = make_inventory(tmp_path, {"storage": {"path": str(tmp_path / "no" / "such")}})
    for context in ("prolog_slurmd", "epilog_slurmd"):
        res = node_check(inv, env={"SLURM_SCRIPT_CONTEXT": context})
        assert res.returncode == 1
        assert f"({context.split('_')[0]})" in res.stdout
        assert res.stderr.strip().splitlines()[-1].startswith(
            "burnin: node-check: storage: storage.path ")
        assert "scontrol" not in res.stdout + res.stderr
    res = node_check(inv, env={"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"})
    assert res.returncode == 2 and "runs on the node it checks" in res.stderr


def test_health_mode_that_cannot_drain_exits_3(tmp_path):
    inv = make_inventory(tmp_path, {"storage": {"path": str(tmp_path / "no" / "such")}},
                         node_check={"scontrol": str(tmp_path / "no-scontrol")})
    res = node_check(inv, "--mode", "health")
    assert res.returncode == 3
    assert "scontrol not found" in res.stderr


def test_usage_errors_exit_2_without_a_traceback(tmp_path):
    inv = make_inventory(tmp_path, name="not-this-host")
    res = node_check(inv)
    assert res.returncode == 2 and "is not in" in res.stderr and "--node" in res.stderr
    assert node_check(inv, "--node", "not-this-host").returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nnodes: [{name: a}]\nnode_check: {budget_s: 0}\n")
    res = node_check(bad)
    assert res.returncode == 2 and "node_check.budget_s" in res.stderr
    assert "Traceback" not in res.stderr


def test_node_check_imports_neither_torch_nor_paramiko_nor_psycopg(tmp_path, nvml):
    nvml(devices=[{}, {}])
    inv = make_inventory(tmp_path, {"gpus": 2})
    res = node_check(inv, python_args=("-X", "importtime"))
    assert res.returncode == 0, res.stdout + res.stderr
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert "pynvml" in imported and "burnin" in imported  # the list is the real one
    assert not imported & {"torch", "paramiko", "psycopg", "psycopg2", "numpy"}


def test_with_a_postgresql_ledger_a_finding_is_a_ledger_event(tmp_path, pg_url):
    from burnin.ledger.api import Ledger

    inv = make_inventory(tmp_path, {"storage": {"path": str(tmp_path / "no" / "such")}},
                         name="n1")
    doc = yaml.safe_load(inv.read_text())
    doc["quarantine"] = {"ledger": pg_url}
    inv.write_text(yaml.safe_dump(doc))
    # node-check never creates a ledger: where none was made, it says so and goes on
    res = node_check(inv, "--node", "n1", env={"SLURM_SCRIPT_CONTEXT": "epilog_slurmd"})
    assert res.returncode == 1 and "not written to the ledger" in res.stderr
    ledger = Ledger(pg_url)  # made on purpose, as a run or an operator makes it
    res = node_check(inv, "--node", "n1", env={"SLURM_SCRIPT_CONTEXT": "epilog_slurmd"})
    assert res.returncode == 1 and "not written" not in res.stderr, res.stderr
    events = ledger.history("n1")
    assert [(e["event"], e["who"]) for e in events] == [
        ("node-check", f"node-check on {socket.gethostname()}")]
    assert events[0]["why"].startswith("epilog: storage: storage.path ")
    assert not ledger.quarantined()  # an event, not a quarantine: Slurm holds the node
