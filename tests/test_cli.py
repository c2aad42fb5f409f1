"""The burnin command's conventions: --version, --json wherever it prints state, exit codes
a pipeline can gate on (compare's regressions), hostlists, quarantine by hand."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.suiterun import script
from test_reports import burn_record, sweep_record

import burnin
from burnin.ledger.api import Ledger


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burnin", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_version():
    res = cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"burnin {burnin.__version__}"


INVENTORY = """\
version: 1
cluster: rack9
defaults: {transport: ssh, gpus: 8, gpu_model: H100-SXM5-80GB}
nodes:
  - name: gpu[01-02]
    address: 10.0.0.[1-2]
    labels: {rack: r9}
  - name: cpu1
    gpus: 0
    transport: local
"""


def test_inventory_check_json(tmp_path):
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    res = cli("inventory", "check", str(path), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["valid"] and doc["cluster"] == "rack9"
    assert [(n["name"], n["address"], n["gpus"]) for n in doc["nodes"]] == [
        ("gpu01", "10.0.0.1", 8), ("gpu02", "10.0.0.2", 8), ("cpu1", "cpu1", 0)]
    assert doc["nodes"][0]["ssh"]["port"] == 22 and doc["nodes"][0]["labels"] == {"rack": "r9"}
    path.write_text(INVENTORY.replace("gpus: 0", "gpus: none"))
    res = cli("inventory", "check", str(path), "--json")
    assert res.returncode == 2
    doc = json.loads(res.stdout)
    assert doc["valid"] is False and f"{path}:9: nodes[1].gpus" in doc["errors"][0]


def run_dir(path: Path, tflops: float, temp: float, busbw: float) -> Path:
    path.mkdir()
    records = [burn_record("g1", tflops, temps=(60, temp)), sweep_record("g1", busbw),
               burn_record("g2", 700.0), sweep_record("g2", 400.0)]
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("tflops,temp,busbw,regressed", [
    (700.0, 70, 400.0, []),                                        # nothing moved
    (800.0, 60, 460.0, []),                                        # better is not worse
    (600.0, 70, 400.0, ["device_tflops"]),                         # lower TFLOPS: worse
    (700.0, 80, 400.0, ["gpu_temperature_max_celsius"]),           # hotter: worse
    (700.0, 70, 300.0, ["allreduce_busbw_gbps"]),                  # lower GB/s: worse
    (690.0, 75, 390.0, []),                                        # within 10%
], ids=["same", "better", "slower", "hotter", "less-bandwidth", "within-threshold"])
def test_compare_exits_1_when_a_figure_regressed(tmp_path, tflops, temp, busbw, regressed):
    a = run_dir(tmp_path / "a", 700.0, 70, 400.0)
    b = run_dir(tmp_path / "b", tflops, temp, busbw)
    res = cli("compare", str(a), str(b))
    assert res.returncode == (1 if regressed else 0), res.stdout + res.stderr
    assert f"{len(regressed)} of them the wrong way" in res.stdout
    doc = json.loads(cli("compare", str(a), str(b), "--json").stdout)
    assert sorted(m["metric"] for m in doc["moved"] if m["regressed"]) == regressed
    assert doc["regressed"] == len(regressed)
    assert all(m["node"] == "g1" for m in doc["moved"])
    if regressed == ["device_tflops"]:
        (move,) = doc["moved"]
        assert move == {"node": "g1", "metric": "device_tflops",
                        "labels": {"check": "burn", "device": "cuda:0"}, "old": 700.0,
                        "new": 600.0, "change": pytest.approx(-1 / 7), "better": "higher",
                        "regressed": True}
        assert "g1 device_tflops{check=burn,device=cuda:0}: 700 -> 600 (-14.3%)  REGRESSED" \
            in res.stdout
    assert cli("compare", str(a), str(tmp_path / "nope")).returncode == 2


def gate_inventory(tmp: Path, actions: str = "") -> Path:
    path = tmp / "inv.yaml"
    path.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: lab
        defaults: {{transport: local, gpus: 0}}
        nodes:
          - name: n[1-4]
        quarantine:
          ledger: {tmp / 'ledger.db'}
        """) + actions)
    Ledger(tmp / "ledger.db")  # burnin ledger init: commands never create one
    return path


def test_quarantine_by_hand_with_actions_json_and_hostlists(tmp_path):
    log = tmp_path / "hook.log"
    hook = script(tmp_path / "hook", f'echo "$1 $2" >> {log}\n')
    inv = gate_inventory(tmp_path, f"  actions: [command]\n  command: [{hook}, '{{node}}', "
                                   "'{reason}']\n")
    res = cli("quarantine", "add", "n[1-2]", "--reason", "fan noisy", "--who", "ann",
              "--inventory", str(inv))
    assert res.returncode == 0, res.stderr
    assert log.read_text().splitlines() == ["n1 by hand (ann): fan noisy",
                                            "n2 by hand (ann): fan noisy"]
    listed = json.loads(cli("quarantine", "list", "--inventory", str(inv), "--json").stdout)
    assert [(n["node"], n["by_hand"], n["set_by"], n["run_id"]) for n in listed["nodes"]] == [
        ("n1", True, "ann", None), ("n2", True, "ann", None)]
    assert listed["nodes"][0]["reasons"] == ["quarantined by hand by ann: fan noisy"]
    shown = json.loads(cli("quarantine", "--inventory", str(inv), "show", "n1", "--json").stdout)
    (node,) = shown["nodes"]
    assert node["in_quarantine"] and [h["event"] for h in node["history"]] == [
        "quarantined", "action"]
    assert node["history"][0]["who"] == "ann" and node["history"][0]["why"] == "fan noisy"
    # Clean re-validation runs never release a node an operator quarantined.
    ledger = Ledger(tmp_path / "ledger.db")
    for _ in range(3):
        assert ledger.record_clean("n1", "r", 2)[1] is False
    assert ledger.quarantined() == {"n1", "n2"}
    # release takes a hostlist; a node not in quarantine is named, and exits 1.
    res = cli("quarantine", "release", "n[1-3]", "--reason", "fan replaced", "--who", "bob",
              "--inventory", str(inv), "--json")
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    assert [r["node"] for r in doc["released"]] == ["n1", "n2"]
    assert doc["not_in_quarantine"] == ["n3"]
    assert ledger.quarantined() == set()
    res = cli("quarantine", "release", "n[1-2]", "--reason", "x", "--inventory", str(inv))
    assert res.returncode == 1 and "not in quarantine, nothing to release: n[1-2]" in res.stderr
    assert cli("quarantine", "show", "n[1-", "--inventory", str(inv)).returncode == 2
    shown = cli("quarantine", "show", "n4", "--inventory", str(inv), "--json")
    assert shown.returncode == 1 and not json.loads(shown.stdout)["nodes"][0]["in_quarantine"]


def test_quarantine_add_of_a_quarantined_node_keeps_it_for_hand_release(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.record_failure("n1", "lab", ["sdc"], ["sdc: cpu:0: 3 wrong elements"], {}, "r1")
    res = cli("quarantine", "add", "n1", "--reason", "vendor ticket 42", "--ledger",
              str(tmp_path / "ledger.db"))
    assert res.returncode == 0 and "in quarantine already" in res.stdout
    entry = ledger.get("n1")
    assert entry.by_hand and entry.checks == ("sdc",) and entry.run_id == "r1"
    assert entry.reasons[-1].endswith("vendor ticket 42")
    assert ledger.record_clean("n1", "r2", 1) == (1, False)


def test_a_failing_action_of_quarantine_add_exits_1_and_keeps_the_entry(tmp_path):
    inv = gate_inventory(tmp_path, "  actions: [command]\n  command: [/bin/false]\n")
    res = cli("quarantine", "add", "n3", "--reason", "x", "--inventory", str(inv), "--json")
    assert res.returncode == 1
    assert json.loads(res.stdout)["nodes"][0]["actions"][0]["ok"] is False
    assert Ledger(tmp_path / "ledger.db").quarantined() == {"n3"}


def test_a_ledger_from_before_quarantine_by_hand_is_upgraded(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE quarantine (node TEXT PRIMARY KEY, cluster TEXT NOT NULL,
            checks TEXT NOT NULL, reasons TEXT NOT NULL, figures TEXT NOT NULL,
            run_id TEXT NOT NULL, since REAL NOT NULL, updated REAL NOT NULL,
            set_by TEXT NOT NULL, clean_runs INTEGER NOT NULL DEFAULT 0,
            drained_by_burnin INTEGER NOT NULL DEFAULT 0);
        INSERT INTO quarantine VALUES ('n1', 'c', '["health"]', '["health: x"]', '{}', 'r1',
                                       1, 1, 'burnin', 0, 0);""")
    db.close()
    ledger = Ledger(path)
    assert ledger.get("n1").by_hand is False
    assert ledger.record_clean("n1", "r2", 1) == (1, True)


def test_burnin_run_passes_pytest_exit_codes(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ncluster: x\nnodes: []\n")
    res = cli("run", "--inventory", str(bad), cwd=tmp_path)
    assert res.returncode == 4 and "invalid inventory" in res.stderr
    inv = tmp_path / "inv.yaml"
    py = script(tmp_path / "py", "echo 'GPU has fallen off the bus' >&2\nexit 3\n")
    inv.write_text(f"version: 1\ncluster: x\ndefaults: {{transport: local, gpus: 0, "
                   f"python: {py}}}\nnodes:\n  - name: n1\n")
    res = cli("run", "--inventory", "inv.yaml", "-k", "health", "--no-quarantine",
              cwd=tmp_path)
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    assert (tmp_path / "reports" / "latest" / "junit.xml").is_file(), "./reports by default"
    res = cli("run", "--inventory", str(inv), "-k", "no_such_check", "--reports",
              str(tmp_path / "elsewhere"), cwd=tmp_path)
    assert res.returncode == 5, res.stdout[-2000:]
