"""`burnin run --rolling` on a fleet without Slurm, on real SSH test hosts
(tests/support/testhosts.py), with stand-in `rolling.hooks` on the controller: a node whose
busy hook says busy is not validated until it says idle, `max_out: 1` keeps every other
node in service meanwhile, a loop killed while it waits is resumed by the next one (the node
it had taken out fills the one place), and a node that fails goes to quarantine with its
back hook never run. Each hook's answer is in the node's ledger history."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.suiterun import NO_HYPOTHESIS, REPO
from test_interrupt import wait_for

from burnin.ledger.api import Ledger
from burnin.ledger.rolling import HOOK, OUT, VALIDATED

pytestmark = pytest.mark.slow


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


def stand_in_hooks(tmp: Path) -> dict:
    """Hooks that keep their state in files: `<node>.busy` is a job, `<node>.out` a node
    out of service; the out hook logs how many are out once it has added its node."""
    state, log = tmp / "state", tmp / "hooks.log"
    state.mkdir()
    busy = script(tmp / "busy", f'echo "busy $1 $2" >> {log}\n'
                                f'[ -e {state}/$1.busy ] && {{ echo "job 17 on $1"; exit 0; }}\n'
                                "exit 1\n")
    out = script(tmp / "out", f'touch {state}/$1.out\n'
                              f'echo "out $1 $(ls {state} | grep -c "\\.out$")" >> {log}\n'
                              'echo "cordoned $1"\n')
    back = script(tmp / "back", f'rm -f {state}/$1.out; echo "back $1" >> {log}\n')
    return {"busy": [busy, "{node}", "{address}"], "out": [out, "{node}"],
            "back": [back, "{node}"], "timeout_s": 20}


def rolling(inv: Path, reports: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "burnin", "run", "--rolling", "--inventory",
                             str(inv), "--reports", str(reports), "-k", "health",
                             "-p", "no:cacheprovider", "-q"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, **NO_HYPOTHESIS})


def test_hooks_wait_for_idle_keep_max_out_resume_after_a_kill_and_never_return_a_failure(
        make_hosts, tmp_path):
    hosts = make_hosts(3)
    h1, h2, h3 = (h.name for h in hosts)
    ledger_path = tmp_path / "ledger.db"
    Ledger(ledger_path)
    # h3 fails health: the inventory wants more CPUs than it has
    inv = hosts.write_inventory(tmp_path / "inv.yaml",
                                nodes={h3: {"checks": {"health": {"cpus": 4096}}}})
    doc = yaml.safe_load(inv.read_text())
    doc["quarantine"] = {"ledger": str(ledger_path), "actions": []}
    doc["rolling"] = {"max_out": 1, "drain_timeout_s": 120, "poll_s": 0.2, "every": "7d",
                      "hooks": stand_in_hooks(tmp_path)}
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    state, log = tmp_path / "state", tmp_path / "hooks.log"
    (state / f"{h1}.busy").touch()
    ledger = Ledger(ledger_path)
    reports = tmp_path / "reports"

    first = rolling(inv, reports)
    try:
        wait_for(lambda: ledger.rolling_last().get(h1) == OUT
                 and any("job 17" in e["why"] for e in ledger.history(h1)), 120,
                 f"{h1} taken out and its busy hook saying busy")
    except AssertionError:
        os.killpg(first.pid, signal.SIGKILL)
        raise AssertionError(first.communicate()[0].decode(errors="replace")[-3000:]) from None
    os.killpg(first.pid, signal.SIGKILL)  # a crash: nothing given back
    first.communicate()
    assert (state / f"{h1}.out").exists()

    second = rolling(inv, reports)
    time.sleep(3)  # the second loop takes h1 up and waits on it: nobody else goes out
    assert sorted(p.name for p in state.glob("*.out")) == [f"{h1}.out"]
    assert VALIDATED not in {e["event"] for e in ledger.history(h1)}, "validated while busy"
    idle_at = time.time()
    (state / f"{h1}.busy").unlink()
    text = second.communicate(timeout=300)[0].decode(errors="replace")
    assert second.returncode == 1, text[-3000:]  # h3 failed

    assert set(ledger.rolling_validated()) == {h1, h2}, text[-3000:]
    assert ledger.rolling_validated()[h1] > idle_at
    assert ledger.quarantined() == {h3}
    calls = log.read_text().split("\n")
    assert max(int(c.split()[2]) for c in calls if c.startswith("out ")) == 1, calls
    assert calls.count(f"out {h1} 1") == 1, "the second loop did not take up the killed one's"
    assert f"back {h3}" not in calls, "a failed node was put back in service"
    assert (state / f"{h3}.out").exists() and not (state / f"{h1}.out").exists()
    assert f"busy {h1} {hosts[0].address}" in calls  # {node} and {address} each one word
    hooks_said = [e["why"] for e in ledger.history(h1) if e["event"] == HOOK]
    assert any(w.startswith("out hook: exit 0: cordoned") for w in hooks_said), hooks_said
    assert any(w.startswith("back hook: exit 0") for w in hooks_said), hooks_said
