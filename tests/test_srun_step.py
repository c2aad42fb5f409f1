"""One job step over many nodes, controller side, without Slurm: a stand-in srun that
starts the real bootstrap once per task, broadcasts stdin, labels every line with its task
and splits long lines as srun does (tests/test_slurm*.py run the real one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from burnin.transports import CommandResult
from burnin.transports.srun_step import Refused, command, envelope, run_step

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
# Task i runs on node i of argv[1]; stdin goes to every task; each output line comes back
# as "i: text", cut into pieces of FAKE_SPLIT bytes (srun: its 1 KiB I/O messages).
FAKE_SRUN = r"""
import os, subprocess, sys, threading
nodes, argv = sys.argv[1].split(","), sys.argv[3:]
split = int(os.environ.get("FAKE_SPLIT", "1024"))
procs = []
for i, n in enumerate(nodes):
    env = {**os.environ, "SLURMD_NODENAME": n, "SLURM_LOCALID": str(nodes[:i].count(n))}
    procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=env))
lock = threading.Lock()
def pump(i, pipe, out):
    for line in iter(pipe.readline, b""):
        for k in range(0, len(line), split):
            with lock:
                out.write(f"{i}: ".encode() + line[k:k + split].rstrip(b"\n") + b"\n")
                out.flush()
def feed():
    for chunk in iter(lambda: os.read(0, 65536), b""):
        for p in procs:
            try:
                p.stdin.write(chunk)
                p.stdin.flush()
            except OSError:
                pass
    for p in procs:
        try:
            p.stdin.close()
        except OSError:
            pass
threading.Thread(target=feed, daemon=True).start()
pumps = [threading.Thread(target=pump, args=(i, s, o)) for i, p in enumerate(procs)
         for s, o in ((p.stdout, sys.stdout.buffer), (p.stderr, sys.stderr.buffer))]
for t in pumps:
    t.start()
codes = [p.wait() for p in procs]
for t in pumps:
    t.join()
for i, c in enumerate(codes):
    if c:
        sys.stderr.write(f"srun: error: {nodes[i]}: task {i}: Exited with exit code {c}\n")
"""

# A probe: prints its payload back (padded past one srun message), or as told, hangs,
# dies, floods stdout, or stays on until its lifeline ends it.
PROBE = r"""
import json, sys, time
import probelib
payload = probelib.read_payload()
probelib.watch_controller(payload, "echo")
act = payload.get("act", "echo")
if act == "hang":
    time.sleep(600)
if act == "slow":
    time.sleep(15)
if act == "die":
    print("GPU has fallen off the bus", file=sys.stderr, flush=True)
    sys.exit(3)
if act == "flood":
    sys.stdout.write("x" * 200000)
    sys.stdout.flush()
    time.sleep(600)
if act == "stay":
    print("BURNIN_PROGRESS " + json.dumps({"staying": True}), file=sys.stderr, flush=True)
    time.sleep(600)
print(json.dumps({"payload": payload, "pad": "p" * 3000}))
"""


def probes(tmp_path: Path) -> dict[str, str]:
    return {"echo.py": PROBE, "probelib.py": (REPO / "probes" / "probelib.py").read_text()}


def step(tmp_path: Path, nodes: list[str], acts: dict[str, str], timeout_s: float = 60,
         max_stdout: int = 1 << 20, cancel=None, on_stderr=None, split: int = 100,
         timeouts: dict[str, float] | None = None, workdirs: dict[str, Path] | None = None):
    fake = tmp_path / "fake_srun.py"
    fake.write_text(FAKE_SRUN)
    per_node = {n: {"stdin": json.dumps({"node": n, "act": acts.get(n, "echo"),
                                         "watchdog_s": 30}),
                    "workdir": str((workdirs or {}).get(n, tmp_path / "remote"))}
                for n in dict.fromkeys(nodes)}
    argv = [sys.executable, str(fake), ",".join(nodes), "--",
            *command(dict.fromkeys(nodes, sys.executable), "echo")]
    env = {**os.environ, "FAKE_SPLIT": str(split)}
    return run_step(argv, env, envelope(probes(tmp_path), per_node, True), nodes,
                    [(timeouts or {}).get(n, timeout_s) for n in nodes], max_stdout, on_stderr,
                    cancel)


def test_each_task_gets_its_nodes_payload_and_its_output_back_whole(tmp_path):
    results, _ = step(tmp_path, ["a", "b", "c"], {})
    for node, r in zip("abc", results, strict=True):
        assert isinstance(r, CommandResult) and r.exit_code == 0, r
        doc = json.loads(r.stdout)  # put back together from 100-byte pieces
        assert doc["payload"]["node"] == node and doc["pad"] == "p" * 3000
    assert list((tmp_path / "remote").iterdir()) == [], "probes left behind on the node"


def test_a_workdir_another_user_could_swap_is_refused_on_that_node_alone(tmp_path):
    """The bootstrap runs the SSH staging's own check (nodeside.SAFE_WORKDIR) first."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "theirs").mkdir(mode=0o700)
    os.chown(tmp_path / "theirs", 4242, 4242)  # another local user made it first
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    results, _ = step(tmp_path, ["a", "b", "c", "d"], {},
                      workdirs={"b": tmp_path / "link", "c": tmp_path / "theirs",
                                "d": tmp_path / "open"})
    a, b, c, d = results
    assert isinstance(a, CommandResult) and a.exit_code == 0, a
    for r, node, why in ((b, "b", "is a symbolic link"),
                         (c, "c", "is owned by uid 4242, not by the login user"),
                         (d, "d", "is writable by group or others (mode 777)")):
        assert isinstance(r, Refused), r
        assert r.startswith(f"refusing to stage probes in workdir {tmp_path}") \
            and f" on {node}: " in r and why in r, r
    for refused in ("elsewhere", "theirs", "open"):
        assert list((tmp_path / refused).iterdir()) == [], "nothing may be staged there"


def test_a_task_that_dies_or_hangs_fails_alone_and_the_step_ends(tmp_path):
    start = time.monotonic()
    # Probes alive 10 s in: the hung one's timeout (3 s) and the kill's grace are long past,
    # the slow one (15 s from its start, after the test's) still runs; a loaded machine
    # gets 5 s and more of slack either side.
    running = {}
    threading.Timer(10, lambda: running.update(at_10s=hung_probes(tmp_path))).start()
    results, said = step(tmp_path, ["a", "b", "c"], {"a": "slow", "b": "die", "c": "hang"},
                         timeouts={"c": 3})
    assert time.monotonic() - start < 300, "the step waited for the hung probe (600 s)"
    a, b, c = results
    assert a.exit_code == 0 and json.loads(a.stdout)["payload"]["node"] == "a"
    assert b.exit_code == 3 and b"GPU has fallen off the bus" in b.stderr_tail
    assert c.timed_out and c.exit_code is None and not a.timed_out and not b.timed_out
    # Stopped by the controller's word while the step went on, not when it ended.
    assert len(running["at_10s"]) == 1, "only a's slow probe may still run"
    assert not hung_probes(tmp_path)


def test_output_past_its_bound_fails_that_node_only(tmp_path):
    results, _ = step(tmp_path, ["a", "b"], {"b": "flood"}, max_stdout=50000)
    assert results[0].exit_code == 0 and not results[0].overflow
    assert results[1].overflow and len(results[1].stdout) <= 50000 + 1024


def test_several_tasks_on_one_node_each_come_back_on_their_own(tmp_path):
    results, _ = step(tmp_path, ["a", "a", "b"], {})
    assert [json.loads(r.stdout)["payload"]["node"] for r in results] == ["a", "a", "b"]


def test_stderr_reaches_each_nodes_own_callback(tmp_path):
    seen: dict[str, bytearray] = {"a": bytearray(), "b": bytearray()}
    cancel = threading.Event()

    def cancel_once_both_spoke() -> None:  # the probes stay on until cancelled
        deadline = time.monotonic() + 60
        while not all(b"BURNIN_PROGRESS" in seen[n] for n in seen) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        cancel.set()
    threading.Thread(target=cancel_once_both_spoke, daemon=True).start()
    results, _ = step(tmp_path, ["a", "b"], {"a": "stay", "b": "stay"}, cancel=cancel,
                      on_stderr={n: seen[n].extend for n in seen})
    assert all(r.cancelled for r in results)
    assert all(b"BURNIN_PROGRESS" in seen[n] for n in seen)
    assert gone(tmp_path), "a cancelled step left its probes running"


def gone(tmp_path: Path, within_s: float = 60) -> bool:
    """Whether the step's probes are gone within `within_s`: a loaded machine takes its
    time to deliver the signals; a probe left behind is still there at the end."""
    deadline = time.monotonic() + within_s
    while hung_probes(tmp_path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_a_controller_that_dies_leaves_no_probe_running(tmp_path):
    """The lifeline: srun's stdin closing (the controller died) reaches every task."""
    fake = tmp_path / "fake_srun.py"
    fake.write_text(FAKE_SRUN)
    per_node = {n: {"stdin": json.dumps({"act": "stay", "watchdog_s": 30}),
                    "workdir": str(tmp_path / "remote")} for n in ("a", "b")}
    proc = subprocess.Popen([sys.executable, str(fake), "a,b", "--",
                             *command(dict.fromkeys("ab", sys.executable), "echo")],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    proc.stdin.write(envelope(probes(tmp_path), per_node, True))
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    while len(hung_probes(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(hung_probes(tmp_path)) == 2
    proc.stdin.close()  # what a SIGKILLed controller's end of the pipe does
    proc.wait(timeout=30)
    assert gone(tmp_path), "the controller's end of the lifeline closed, a probe ran on"


def hung_probes(tmp_path: Path) -> list[int]:
    """PIDs of probes started from this test's remote directory, still running."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(tmp_path / "remote").encode() in cmdline and b"echo.py" in cmdline:
            found.append(int(pid))
    return found
