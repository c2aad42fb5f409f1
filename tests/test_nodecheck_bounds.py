"""A hung NVML call cannot hold node-check past its budget: the GPU readings are taken in a
child process (burnin/nodecheck/gpuread.py) that node-check kills at its deadline, as the
storage check's. The NVML emulator (tests/nvmlemu) answers the GPUs; a site module of the
test's own, loaded after it, makes nvmlDeviceGetCount never return and says which
process made the call (and, in one case, keeps the check's own thread from killing its
child, which node-check must then kill as it ends)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from test_nodecheck import HANG_S, ROOT, make_inventory

HANG_SITE = """
import os, time
if os.environ.get("BURNIN_TEST_NVML_HANG"):
    import pynvml

    def never_returns(*args, **kwargs):
        with open(os.environ["BURNIN_TEST_NVML_HANG"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(3600)

    pynvml.nvmlDeviceGetCount = never_returns
if os.environ.get("BURNIN_TEST_LATE_KILL"):
    import subprocess, threading
    _kill = subprocess.Popen.kill

    def late(self):
        if threading.current_thread().name.startswith("node-check-"):
            time.sleep(3600)  # the check's own thread never gets to kill its child
        _kill(self)

    subprocess.Popen.kill = late
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("late_kill", [False, True], ids=["killed-by-its-check",
                                                        "killed-when-node-check-ends"])
def test_a_hung_nvml_call_is_a_finding_within_the_budget_and_its_reader_is_killed(
        tmp_path, nvml, late_kill):
    nvml(devices=[{}, {}])
    site = tmp_path / "hang-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HANG_SITE)
    said = tmp_path / "hung-pid"
    inv = make_inventory(tmp_path, {"gpus": 2}, node_check={"budget_s": 3})
    env = {**os.environ, "BURNIN_TEST_NVML_HANG": str(said),
           **({"BURNIN_TEST_LATE_KILL": "1"} if late_kill else {}),
           "PYTHONPATH": os.pathsep.join([os.environ["PYTHONPATH"], str(ROOT), str(site)])}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "burnin", "node-check", "--inventory",
                             str(inv), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    out, err = proc.communicate(timeout=HANG_S)
    took = time.monotonic() - started
    assert proc.returncode == 1, out + err
    doc = json.loads(out)
    gpu = next(c for c in doc["checks"] if c["check"] == "gpu")
    assert gpu["finished"] is False
    # (the budget's own words where the killed reader's answer came a moment too late)
    assert [f["text"] for f in gpu["findings"]] in (
        ["NVML did not answer within the time budget (a driver call hung?)"],
        ["did not finish within its time budget (node_check.budget_s 3 s)"])
    assert all(c["finished"] for c in doc["checks"] if c["check"] != "gpu")
    assert doc["elapsed_s"] < 3.5 and took < HANG_S
    hung = int(said.read_text())
    assert hung != proc.pid  # the call hung in the reader, not in node-check
    deadline = time.monotonic() + 10
    while alive(hung) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(hung), "the hung reader was left running"


def test_the_nvml_reader_never_imports_from_the_directory_node_check_was_started_in(
        tmp_path, nvml):
    nvml(devices=[{}])
    planted = tmp_path / "cwd"
    marker = tmp_path / "planted-code-ran"
    (planted / "burnin" / "nodecheck").mkdir(parents=True)
    (planted / "burnin" / "__init__.py").write_text("")
    (planted / "burnin" / "nodecheck" / "__init__.py").write_text("")
    (planted / "burnin" / "nodecheck" / "gpuread.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n")
    inv = make_inventory(tmp_path, {"gpus": 1})
    # node-check itself from the checkout, whatever its working directory holds
    start = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
             "from burnin.cli import main\n"
             f"sys.exit(main(['node-check', '--inventory', {str(inv)!r}]))\n")
    res = subprocess.run([sys.executable, "-c", start], capture_output=True, text=True,
                         cwd=planted, timeout=HANG_S,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [os.environ["PYTHONPATH"], str(ROOT)])})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[gpu, xid, fabric, storage, host]" in res.stdout
    assert not marker.exists()


def test_a_storage_check_that_hangs_is_killed_before_the_checks_deadline(tmp_path, monkeypatch):
    from burnin.nodecheck import budget, storage
    # A stat on a hard-mounted NFS server that went away, planted as a child that sleeps.
    said = tmp_path / "child-pid"
    monkeypatch.setattr(storage, "CHILD", f"import os, time; open({str(said)!r}, 'w')"
                                          f".write(str(os.getpid())); time.sleep(600)")
    started = time.monotonic()
    out = budget.run_checks({"storage": lambda: storage.check(
        str(tmp_path), None, "n1", started + 1.5)}, started + 1.5, 1.5)
    assert time.monotonic() - started < HANG_S
    assert not out[0].finished
    # its own words, not the budget's (where the machine is too loaded to answer in the
    # margin, the budget's)
    assert [f.text for f in out[0].failures] in (
        [f"storage.path {tmp_path} did not answer a stat, write, fsync and read-back within "
         "the time budget (a hung file system?)"],
        ["did not finish within its time budget (node_check.budget_s 1.5 s)"])
    child = int(said.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the hung storage check was left running"
