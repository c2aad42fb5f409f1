"""The probe runner against real misbehaving probes: garbage, floods, hangs, crashes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from burnin.inventory.schema import Node
from burnin.probe.protocol import run_probe, shape_problem
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent

GOOD_DOC = {"probe": "p", "schema": 1, "node": {}, "devices": [], "figures": {}, "errors": []}


def make_probe(tmp_path: Path, body: str) -> LocalTransport:
    probes = tmp_path / "probes"
    probes.mkdir(exist_ok=True)
    (probes / "p.py").write_text(textwrap.dedent(body))
    return LocalTransport(Node(name="n1", address="n1", transport="local"), probes)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_good_probe_gets_settings_on_stdin(tmp_path):
    t = make_probe(tmp_path, """
        import json, sys
        s = json.load(sys.stdin)
        print(json.dumps({"probe": "p", "schema": 1, "node": {}, "devices": [],
                          "figures": {"echo": s}, "errors": []}))
        """)
    out = run_probe(t, "p", {"x": 1}, timeout_s=30)
    assert out.ok, out.reason
    assert out.data["figures"]["echo"] == {"x": 1}


@pytest.mark.parametrize("body,reason", [
    ("print('hello, not json')", "printed no valid JSON"),
    ("pass", "printed nothing on stdout"),
    ("import sys; sys.stdout.buffer.write(b'\\xff\\xfe{')", "printed no valid JSON"),
    ("print('[1, 2]')", "wrong shape: expected a JSON object"),
    ("import json; print(json.dumps({'probe': 'q', 'schema': 1}))", "'probe' is 'q'"),
    ("import json; print(json.dumps({'probe': 'p', 'schema': 1, 'node': {}, 'devices': 3,"
     " 'figures': {}, 'errors': []}))", "'devices' should be a JSON array"),
    ("import sys; print('boom: disk on fire', file=sys.stderr); sys.exit(3)",
     "exited with status 3; stderr: boom: disk on fire"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed by signal 9"),
    ("raise ImportError('No module named torch')", "ImportError: No module named torch"),
])
def test_every_bad_outcome_is_a_failure_with_its_reason(tmp_path, body, reason):
    out = run_probe(make_probe(tmp_path, body), "p", {}, timeout_s=30)
    assert not out.ok
    assert reason in out.reason


def test_flood_of_output_is_cut_and_killed_not_buffered(tmp_path):
    # A node that prints a gigabyte: the runner keeps its bound and kills the probe.
    t = make_probe(tmp_path, """
        import sys
        chunk = b"x" * (1 << 20)
        for _ in range(1024):
            sys.stdout.buffer.write(chunk)
        """)
    start = time.monotonic()
    out = run_probe(t, "p", {}, timeout_s=60, max_output=4 << 20)
    assert not out.ok
    assert "printed more than 4194304 bytes; killed" in out.reason
    assert time.monotonic() - start < 30


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    t = make_probe(tmp_path, f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(600)
        """)
    out = run_probe(t, "p", {}, timeout_s=2)
    assert not out.ok
    assert "killed at its timeout of 2 s" in out.reason
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the probe's child outlived the timeout"


def test_probe_that_ignores_sigterm_is_still_killed(tmp_path):
    pidfile = tmp_path / "pid"
    t = make_probe(tmp_path, f"""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        time.sleep(600)
        """)
    out = run_probe(t, "p", {}, timeout_s=2)
    assert not out.ok and "timeout" in out.reason
    # Gone: SIGTERM alone would have left it sleeping; only the SIGKILL escalation ends it.
    assert not alive(int(pidfile.read_text())), "the probe survived its timeout"


def test_probe_that_closes_stdout_and_hangs_is_timed_out(tmp_path):
    t = make_probe(tmp_path, """
        import json, os, sys, time
        print(json.dumps({"probe": "p", "schema": 1, "node": {}, "devices": [],
                          "figures": {}, "errors": []}), flush=True)
        os.close(1); os.close(2)
        time.sleep(600)
        """)
    out = run_probe(t, "p", {}, timeout_s=2)
    assert not out.ok and "timeout" in out.reason


def test_missing_interpreter_fails_the_node(tmp_path):
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "p.py").write_text("print('{}')")
    node = Node(name="n1", address="n1", transport="local", python="/nonexistent/python3")
    out = run_probe(LocalTransport(node, probes), "p", {}, timeout_s=10)
    assert not out.ok
    assert "could not start: interpreter or probe not found" in out.reason
    assert "/nonexistent/python3" in out.reason


def test_probe_that_never_reads_large_settings_does_not_hang_the_runner(tmp_path):
    t = make_probe(tmp_path, f"print({json.dumps(json.dumps(GOOD_DOC))})")
    out = run_probe(t, "p", {"blob": "y" * (4 << 20)}, timeout_s=30)
    assert out.ok, out.reason


@pytest.mark.parametrize("doc,problem", [
    (GOOD_DOC, ""),
    ({**GOOD_DOC, "schema": 2}, "'schema' is 2"),
    ({**GOOD_DOC, "node": []}, "'node' should be a JSON object"),
    ({**GOOD_DOC, "devices": [1]}, "every entry of 'devices'"),
    ({**GOOD_DOC, "errors": [{}]}, "every entry of 'errors'"),
    ({k: v for k, v in GOOD_DOC.items() if k != "figures"}, "'figures' should be"),
])
def test_shape_problems(doc, problem):
    found = shape_problem("p", doc)
    assert problem in found if problem else found == ""


def test_runner_is_importable_without_torch_on_the_controller():
    # The controller must stay light: nothing of burnin imports torch.
    code = ("import sys, burnin.plugin, burnin.engine.run, burnin.cli; "
            "sys.exit(sorted(m for m in sys.modules if m.split('.')[0] == 'torch') or None)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_a_transport_dropped_without_close_frees_its_node(tmp_path):
    """A caller that runs one probe and drops the transport must not leave the node
    locked "busy" for every later run in the process."""
    node = Node(name="n1", address="n1", transport="local", workdir=str(tmp_path / "w"))
    first = LocalTransport(node, tmp_path, run_id="first")
    first.probe_command("p")  # takes the node's lock
    del first
    second = LocalTransport(node, tmp_path, run_id="second")
    try:
        assert second.probe_command("p")[-1].endswith("p.py")
    finally:
        second.close()


@pytest.mark.parametrize("stderr_first", [True, False])
def test_a_probe_whose_controller_is_gone_stops_even_when_its_stderr_went_first(stderr_first):
    """The lifeline (probelib.watch_controller): when the controller dies, the probe's
    stdin ends, and its stderr pipe usually loses its reader at the same moment. Telling
    stderr why it stops must not be what keeps it alive (a broken pipe killed the watchdog
    thread, and the probe slept on for its 600 s)."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO / "probes")!r})
        import probelib
        probelib.watch_controller(probelib.read_payload(), "p")
        time.sleep(600)
        """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        proc.stdin.write(json.dumps({"watchdog_s": 300}).encode() + b"\n")
        proc.stdin.flush()
        time.sleep(1)  # the watchdog is watching
        ends = [proc.stderr, proc.stdin] if stderr_first else [proc.stdin, proc.stderr]
        ends[0].close()
        time.sleep(0.5)
        ends[1].close()
        # A hang only: the watchdog's SIGTERM is immediate, its SIGKILL comes 5 s later.
        assert proc.wait(timeout=120) in (-15, 137), "the probe outlived its controller"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
