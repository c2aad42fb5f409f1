"""A job step whose output never ends a line, or never stops: the controller's reading of
srun (burnin/transports/srun_step.py) keeps at most LINE_MAX bytes of a line it has not
seen the end of, and a task's stdout past its bound stops that task, whether or not it
came in the bootstrap's frames. Memory stays bounded: measured as this process's peak
resident memory while the step runs. srun is a stand-in here that writes as a node gone
wrong would, labelled as srun labels its tasks' lines (tests/test_slurm*.py run the real
one); it stops when the controller says K for its task, or at its total."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from burnin.transports import CommandResult
from burnin.transports.srun_step import run_step

HANG_BOUND_S = 120  # for a hang only
MAX_STDOUT = 1 << 20
TOTAL = 256 << 20  # what the stand-in writes at most: unbounded, the controller kept it all
GROWTH_MIB = 24
SALLOC_WAIT_S = 60.0  # how long salloc may take to allocate, here

STAND_IN = r"""
import os, sys, threading
mode = sys.argv[1]
def listen():
    for line in sys.stdin.buffer:
        if line.startswith(b"K "):
            os._exit(0)
    os._exit(0)
threading.Thread(target=listen, daemon=True).start()
out = sys.stderr.buffer if mode == "err-endless" else sys.stdout.buffer
piece = b"x" * 65536
sent = 0
if mode in ("out-endless", "err-endless"):
    out.write(b"0: ")  # the task's label, then a line that never ends
while sent < TOTAL:
    out.write(b"0: " + b"x" * 1000 + b"\n" if mode == "out-split" else piece)
    out.flush()
    sent += 1004 if mode == "out-split" else 65536
threading.Event().wait(600)
""".replace("TOTAL", str(TOTAL))


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


@pytest.mark.parametrize("mode", ["out-endless", "err-endless", "out-split"])
def test_a_task_writing_without_end_is_read_in_bounded_memory(tmp_path, mode):
    stand_in = tmp_path / "srun.py"
    stand_in.write_text(STAND_IN)
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
    before = _kib("VmRSS")
    box: list = []
    thread = threading.Thread(target=lambda: box.append(run_step(
        [sys.executable, str(stand_in), mode], {}, b"envelope\n", ["a"], [3.0], MAX_STDOUT)),
        daemon=True)
    thread.start()
    thread.join(HANG_BOUND_S)
    assert box, f"hung: no return within {HANG_BOUND_S} s"
    grew = (_kib("VmHWM") - before) / 1024
    (result,), _ = box[0]
    assert isinstance(result, CommandResult), result
    if mode == "err-endless":
        assert result.timed_out and len(result.stderr_tail) <= 64 << 10, result
    else:
        assert result.overflow and len(result.stdout) <= MAX_STDOUT + (128 << 10), result
    assert grew < GROWTH_MIB, f"the controller grew by {grew:.0f} MiB"


# salloc's holder says the job's facts in its first line, from the allocated node: a stand-in
# that never ends that line, or says no JSON.
SALLOC = r"""
import os, sys, threading
def write():
    if sys.argv[1] == "endless":
        for _ in range(TOTAL // 65536):
            sys.stdout.buffer.write(b"x" * 65536)
            sys.stdout.buffer.flush()
    else:
        print("Welcome to node 7 {", flush=True)
threading.Thread(target=write, daemon=True).start()
sys.stdin.buffer.read()  # held until the controller lets go, as salloc's holder is
os._exit(0)
""".replace("TOTAL", str(TOTAL))


@pytest.mark.parametrize("said", ["endless", "no json"])
def test_a_holder_first_line_without_end_or_json_is_no_allocation(tmp_path, said):
    from burnin.transports.salloc import salloc_holder
    stand_in = tmp_path / "salloc.py"
    stand_in.write_text(SALLOC)
    Path("/proc/self/clear_refs").write_text("5")
    before = _kib("VmRSS")
    box: list = []
    t0 = time.monotonic()
    thread = threading.Thread(target=lambda: box.append(salloc_holder(
        [sys.executable, str(stand_in), said], "burnin-test-none", SALLOC_WAIT_S)),
        daemon=True)
    thread.start()
    thread.join(HANG_BOUND_S)
    assert box, f"hung: no return within {HANG_BOUND_S} s"
    took, grew = time.monotonic() - t0, (_kib("VmHWM") - before) / 1024
    facts, why, holder = box[0]
    assert facts is None and holder is None
    if said == "endless":
        assert why.startswith("the job's first line on its node passed 65536 bytes"), why
        assert len(why) < 1200, len(why)
    # Read to its end or its limit, not until salloc's wait is over (unbounded, the read
    # went on for the whole wait, at the pace of copying what it had kept each time).
    assert took < SALLOC_WAIT_S / 2, f"{took:.0f} s"
    assert grew < GROWTH_MIB, f"the controller grew by {grew:.0f} MiB"
