"""Replays a probe's recorded document (tests/support/replay.py) in place of running the probe,
when $BURNIN_REPLAY is set and this folder is on PYTHONPATH: the interpreter that was
started on `probes/<check>.py` (directly, over SSH, or exec'd by srun's bootstrap) prints
the recorded document and exits before the probe's first line runs.

Test code only. A probe named in $BURNIN_REPLAY_REAL, or one without a recorded document,
runs for real; one named in $BURNIN_REPLAY_REAL_IN_GROUPS runs for real when the controller
made it a member of an inter-node group (its payload names a `group`), and replays on its
own. Chains to the sitecustomize it shadows (the NVML emulator's, say).
"""

import importlib.machinery
import importlib.util
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain() -> None:
    """Run the sitecustomize this one shadows, if the interpreter has one. The test sites
    (the NVML emulator's, the replay's) may shadow each other in either order: each runs
    once, whichever is found first."""
    ran = sys.__dict__.setdefault("_burnin_test_sites", set())
    ran.add(_HERE)
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) not in ran]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None and spec.origin:
        ran.add(os.path.dirname(os.path.abspath(spec.origin)))
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _replay() -> None:
    if not os.environ.get("BURNIN_REPLAY") or not sys.argv or not sys.argv[0].endswith(".py"):
        return
    probe = os.path.basename(sys.argv[0])[:-3]
    tests = os.path.dirname(_HERE)
    if probe in os.environ.get("BURNIN_REPLAY_REAL", "").split(",") or not os.path.exists(
            os.path.join(tests, "corpus", f"{probe}.cpu.json")) or "--worker" in sys.argv:
        return
    if probe in os.environ.get("BURNIN_REPLAY_REAL_IN_GROUPS", "").split(",") and _in_group():
        return
    sys.path.insert(0, tests)
    from support import replay
    code = replay.main(sys.argv, float(os.environ.get("BURNIN_REPLAY_DELAY_S") or 0))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class _Pushback:
    """stdin with its first line, already read, put back in front: for the probe (real or
    replayed) reading its payload; everything else (the lifeline's fileno) is stdin's."""

    def __init__(self, first: str, rest) -> None:
        self._first, self._rest = first, rest

    def readline(self, *args):
        if self._first:
            line, self._first = self._first, ""
            return line
        return self._rest.readline(*args)

    def read(self, *args):
        first, self._first = self._first, ""
        return first + self._rest.read(*args)

    def __getattr__(self, name):
        return getattr(self._rest, name)


def _in_group() -> bool:
    """Whether the controller's payload, the first line on stdin, names an inter-node
    group. Read a byte at a time from the descriptor, so that nothing after the line (the
    controller keeps stdin open: the lifeline) is taken; the line is put back."""
    if sys.stdin is None or os.isatty(0):
        return False
    line = b""
    while not line.endswith(b"\n"):
        try:
            byte = os.read(0, 1)
        except OSError:
            break
        if not byte:
            break
        line += byte
    sys.stdin = _Pushback(line.decode(errors="replace"), sys.stdin)
    try:
        payload = json.loads(line)
    except ValueError:
        return False
    return isinstance(payload, dict) and bool(payload.get("group"))


_chain()
_replay()
