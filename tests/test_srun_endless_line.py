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
from pathlib import Path

import pytest

from burnin.transports import CommandResult
from burnin.transports.srun_step import run_step

HANG_BOUND_S = 120  # for a hang only
MAX_STDOUT = 1 << 20
TOTAL = 256 << 20  # what the stand-in writes at most: unbounded, the controller kept it all
GROWTH_MIB = 24

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
