"""The gate fails closed end to end: a partial run admits nobody, pytest's own junitxml is
refused, and an interrupted run (Ctrl-C, a pipeline's SIGTERM, a controller killed
outright, a node's sshd killed) leaves no probe burning, quarantines nobody and writes a
report that admits nobody."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.replay import replay_python
from support.requires import need, sigint_ignored
from support.suiterun import NO_HYPOTHESIS, SUITES, run_suite, script

from burnin.ledger.api import Ledger

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
LONG = {"burn": {"duration_s": 240, "n": 128, "sample_s": 1, "peer_fraction": 0},
        # sdc prints nothing until it ends: a broken pipe cannot stop it, only its lifeline.
        "sdc": {"duration_s": 240, "n": 64, "random_repeats": 2}}


def admit(report: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burnin", "admit", str(report), *args],
                          capture_output=True, text=True, timeout=60)


def test_a_health_only_run_admits_nobody_and_pytests_own_report_is_refused(pytester):
    inv = pytester.path / "inv.yaml"
    inv.write_text("version: 1\ndefaults: {transport: local, gpus: 0, python: "
                   f"{replay_python(pytester.path / 'replay')}}}\nnodes:\n  - name: n[1-2]\n")
    own = pytester.path / "pytest-own.xml"
    result, reports = run_suite(pytester, inv, "-k", "health", f"--junitxml={own}")
    result.assert_outcomes(passed=2)
    junit = reports / "latest" / "junit.xml"
    res = admit(junit)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "sdc: no testcase" in res.stdout and "allreduce_internode: no testcase" in res.stdout
    assert admit(junit, "--require", "health").returncode == 0
    res = admit(own)
    assert res.returncode == 2 and "not a report burnin wrote" in res.stderr


def probes_on(hosts, name: str) -> list[int]:
    """PIDs of `name` probes running in the test hosts' namespaces."""
    found = []
    for h in hosts.hosts:
        for pid in hosts.pids(h):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if f"{name}.py".encode() in cmdline:
                found.append(pid)
    return found


def wait_for(condition, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.2)
    return time.monotonic() - start


def start(hosts, tmp_path: Path, check: str, **defaults) -> tuple[subprocess.Popen, Path, Path]:
    """pytest running `check` (for about 4 minutes) on every host, once each has started."""
    inv = hosts.write_inventory(tmp_path / "inv.yaml", checks=LONG, **defaults)
    doc = inv.read_text() + f"quarantine: {{ledger: {tmp_path / 'ledger.db'}}}\n"
    inv.write_text(doc)
    Ledger(tmp_path / "ledger.db")  # burnin ledger init: a run never creates a configured one
    reports = tmp_path / "reports"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", SUITES, "--inventory", str(inv),
                             "--reports", str(reports), "-k", check, "-p", "no:cacheprovider",
                             "-q"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, **NO_HYPOTHESIS})
    wait_for(lambda: len(probes_on(hosts, check)) >= len(hosts.hosts), 120,
             f"a {check} probe on every host")
    return proc, reports, tmp_path / "ledger.db"


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_stops_within_seconds_and_admits_nobody(make_hosts, tmp_path, how,
                                                                   finding):
    if how == signal.SIGINT:
        need(sigint_ignored())
    hosts = make_hosts(3)
    proc, reports, ledger = start(hosts, tmp_path, "burn")
    time.sleep(2)  # well into the burn
    sent = time.monotonic()
    os.kill(proc.pid, how)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    took = time.monotonic() - sent
    finding(f"interrupt: {signal.Signals(how).name} during a 240 s burn on 3 SSH hosts: "
            f"run ended {took:.1f} s later")
    text = out.decode(errors="replace")
    assert took < 120, text[-3000:]  # a hang would be the 240 s burn
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, text[-3000:]
    assert probes_on(hosts, "burn") == [], "a probe burns on after the run stopped"
    assert Ledger(ledger).quarantined() == set(), "nobody is quarantined for an interrupt"
    res = admit(reports / "latest" / "junit.xml")
    assert res.returncode == 2 and "did not complete" in res.stderr, res.stderr
    remote = Path(hosts.inventory()["defaults"]["workdir"])
    assert not remote.exists() or list(remote.glob("burnin-*")) == [], "staged probes left"


def quiet_python(tmp_path: Path) -> str:
    """A node python whose probes' stderr goes to a file: a probe that writes nothing to
    the connection cannot notice a dead controller by a broken pipe, only by its lifeline."""
    return script(tmp_path / "quiet-python", f"exec {sys.executable} \"$@\" 2>>{tmp_path}/err\n")


def watching(tmp_path: Path, probes: int) -> None:
    """Wait until `probes` sdc probes (run by quiet_python) have read their settings and
    watch their controller: a probe still importing torch cannot notice it is gone (the
    probes start together, so one may have started a moment ago)."""
    err = tmp_path / "err"
    wait_for(lambda: err.exists() and err.read_text(errors="replace").count(
        " device(s): ") >= probes,
        120, "every probe watching its controller")


def test_a_killed_controller_leaves_no_probe_burning(make_hosts, tmp_path, finding):
    # Two hosts, two probes each on its own lifeline: a third only added a probe burning
    # the shared cores until the lifeline stops it (~5 CPU-s).
    hosts = make_hosts(2)
    proc, _, _ = start(hosts, tmp_path, "sdc", python=quiet_python(tmp_path))
    watching(tmp_path, len(hosts.hosts))
    os.killpg(proc.pid, signal.SIGKILL)  # no handler runs: the lifeline must do it
    proc.wait()
    took = wait_for(lambda: not probes_on(hosts, "sdc"), 15, "every probe gone")
    finding(f"lifeline: controller SIGKILLed, last sdc probe gone {took:.1f} s later")


def test_a_probe_whose_sshd_dies_stops_itself(make_hosts, tmp_path, finding):
    # One host: its probe is the one whose sshd dies (a second host's probe only burned on
    # until the controller was killed at the end).
    hosts = make_hosts(1)
    proc, _, _ = start(hosts, tmp_path, "sdc", python=quiet_python(tmp_path))
    try:
        watching(tmp_path, len(hosts.hosts))
        hosts.kill_all_sshd(hosts[0])  # the connection to h1 drops under its probe
        took = wait_for(lambda: not any(p in probes_on(hosts, "sdc") for p in
                                        hosts.pids(hosts[0])), 15, "h1's probe gone")
        finding(f"lifeline: sshd killed under a probe, probe gone {took:.1f} s later")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
