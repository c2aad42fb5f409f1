"""The time budget: every check runs in its own thread and the run waits for them only
until the deadline. A check still running then (a hung NVML call, a kernel log that never
ends) is reported as not finished, which is a finding: what cannot be measured keeps the
node out. Its thread is a daemon and is left behind; the process exits without it (see
run.py), so slurmd never waits on a hung check. What can block in the kernel beyond a
signal's reach (a stat on a hard-mounted NFS server that is gone) runs in a child process
instead (storage.py), killed at the deadline."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

from burnin.nodecheck.model import CheckResult, fail


def run_checks(checks: dict[str, Callable[[], CheckResult]], deadline: float,
               budget_s: float) -> list[CheckResult]:
    """Each check's result, in `checks`' order, by the monotonic `deadline` at the latest."""
    results: dict[str, CheckResult] = {}
    started = time.monotonic()

    def one(name: str, fn: Callable[[], CheckResult]) -> None:
        t0 = time.monotonic()
        try:
            result = fn()
        except Exception as e:  # a check that cannot read is a node that cannot be vouched for
            result = CheckResult(name, (fail(name, f"could not be checked: "
                                                   f"{type(e).__name__}: {e}"),))
        results[name] = CheckResult(result.check, result.findings, result.finished,
                                    round(time.monotonic() - t0, 3), result.state)

    threads = [threading.Thread(target=one, args=item, daemon=True,
                                name=f"node-check-{item[0]}") for item in checks.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    out = []
    for name in checks:
        done = results.get(name)
        if done is None:
            # No figure of this run in the text: the drain reason stays the same from one
            # check to the next while the cause does.
            done = CheckResult(name, (fail(name, f"did not finish within its time budget "
                                                 f"(node_check.budget_s {budget_s:g} s)"),),
                               finished=False,
                               elapsed_s=round(time.monotonic() - started, 3))
        out.append(done)
    return out


def bounded(name: str, fn: Callable[[], object], deadline: float):
    """fn() in a thread of its own, waited for until `deadline`: TimeoutError after it (the
    workdir on a file system that stopped answering must not hang node-check)."""
    out: list = []

    def call() -> None:
        try:
            out.append((True, fn()))
        except BaseException as e:  # handed to the caller, in its thread
            out.append((False, e))

    t = threading.Thread(target=call, daemon=True, name=f"node-check-{name}")
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    if not out:
        raise TimeoutError(f"{name} did not finish within the time budget")
    ok, value = out[0]
    if not ok:
        raise value
    return value


# A child killed at the deadline is killed this long before it, so that its own finding
# (what hung) is in before run_checks stops waiting and says only "did not finish".
KILL_MARGIN_S = 0.25


def remaining(deadline: float, floor: float = 0.05) -> float:
    """Seconds left before `deadline` (at least `floor`, so that a timeout is never 0)."""
    return max(floor, deadline - time.monotonic())


# The checks' children still running: killed when node-check ends, whatever their thread
# was doing (a thread left at the deadline never kills its child itself).
_CHILDREN: set[subprocess.Popen] = set()
_CHILDREN_LOCK = threading.Lock()


@contextlib.contextmanager
def child(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """`proc` is a check's child until the block ends."""
    with _CHILDREN_LOCK:
        _CHILDREN.add(proc)
    try:
        yield proc
    finally:
        with _CHILDREN_LOCK:
            _CHILDREN.discard(proc)


def kill_children() -> int:
    """Kill every check's child still running (never waited for: one blocked in the kernel
    dies when its call returns); how many there were."""
    with _CHILDREN_LOCK:
        left = [p for p in _CHILDREN if p.poll() is None]
    for p in left:
        with contextlib.suppress(OSError):
            p.kill()
    return len(left)
