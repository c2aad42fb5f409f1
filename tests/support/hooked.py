"""A node's `python:` that runs one probe for real with test_hooks added to its payload
(faults planted in the probe's own timing, which no inventory can ask for), and hands
every other probe to another interpreter (a replaying one: tests/support/replay.py).

The payload's first line is rewritten; the rest of stdin (the controller's lifeline:
heartbeats, then its end) is relayed to the probe as it comes."""

from __future__ import annotations

import sys
from pathlib import Path

from support.suiterun import script

RELAY = '''\
import json, os, subprocess, sys, threading
argv = sys.argv[1:]
if not argv or not argv[0].endswith(PROBE):
    os.execv(OTHER, [OTHER, *argv])
payload = json.loads(sys.stdin.buffer.readline())
payload["test_hooks"] = HOOKS
child = subprocess.Popen([REAL, *argv], stdin=subprocess.PIPE)
child.stdin.write((json.dumps(payload) + "\\n").encode())
child.stdin.flush()
def relay():
    try:
        for chunk in iter(lambda: sys.stdin.buffer.read1(4096), b""):
            child.stdin.write(chunk)
            child.stdin.flush()
    except (OSError, ValueError):
        pass
    try:
        child.stdin.close()
    except OSError:
        pass
threading.Thread(target=relay, daemon=True).start()
os._exit(child.wait())  # the relay thread may still hold stdin: no interpreter teardown
'''


def hooked_python(path: Path, probe: str, hooks: dict, other: str,
                  real: str = sys.executable) -> str:
    """Write, at `path` (and `path`.py beside it), a node's python that runs
    probes/`probe`.py under `real` with `hooks` as its test_hooks, and anything else
    under `other`. Returns its path."""
    relay = path.with_suffix(".py")
    relay.write_text(RELAY.replace("PROBE", repr(f"{probe}.py")).replace(
        "OTHER", repr(other)).replace("REAL", repr(real)).replace("HOOKS", repr(hooks)))
    return script(path, f"exec {sys.executable} {relay} \"$@\"\n")
