"""The read loop every command-running transport shares: the command's deadline, the
run's cancel, the bound on stdout and the tail kept of stderr, in one place.

A transport supplies the Source (a subprocess's pipes, an SSH channel); what happens
once the loop stops (kill the process group, read the exit status) stays its own.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

from burnin.transports import STDERR_TAIL_BYTES

POLL_S = 1.0  # the longest the loop waits before it looks at the deadline and cancel again
# The longest line a transport reads from a node outside a probe's output (the SSH holder's
# `ready <dir>` and `staged <n>`, Slurm's job facts): a path or a reason fits many times
# over; a node that prints more without an end of line is failed rather than buffered.
LINE_MAX = 64 * 1024
# The most of a node's own words that a failure message repeats: a message is read by a
# person and kept in every report, and a node decides what it says.
MESSAGE_MAX = 1000


def capped(text: str, limit: int = MESSAGE_MAX) -> str:
    """`text`, cut to `limit` characters with the count of those left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def too_long(line: bytes) -> bool:
    """A line read with a limit of LINE_MAX bytes that stopped at the limit, not at its end."""
    return len(line) >= LINE_MAX and not line.endswith(b"\n")


class Source(Protocol):
    """A running command's output, as a transport reads it."""

    def ended(self) -> bool:
        """Whether the command's output is over (both streams closed, or the link gone)."""

    def read(self, timeout_s: float) -> tuple[bytes, bytes]:
        """(stdout, stderr) that arrived within `timeout_s`; either may be empty."""


@dataclass(frozen=True)
class Reading:
    """What the loop kept, and why it stopped (none of the flags: the output ended)."""

    stdout: bytes                  # up to one chunk past the bound: the caller cuts it
    stderr_tail: bytes             # the last STDERR_TAIL_BYTES
    timed_out: bool = False
    overflow: bool = False         # stdout passed its bound
    cancelled: bool = False        # the run was interrupted

    @property
    def stopped(self) -> bool:
        """The command must be killed: the loop left it running."""
        return self.timed_out or self.overflow or self.cancelled


def read_bounded(source: Source, deadline: float, max_stdout: int, on_stderr=None,
                 cancel: threading.Event | None = None, poll_s: float = POLL_S) -> Reading:
    """Read `source` until its output ends, the monotonic `deadline` passes, stdout
    passes `max_stdout` bytes, or `cancel` is set; on_stderr(chunk) sees stderr as it
    arrives. Memory stays bounded whatever the command prints. A source whose read()
    wakes up when `cancel` is set may be given a longer `poll_s`."""
    out, err = bytearray(), bytearray()
    timed_out = overflow = cancelled = False
    while not source.ended():
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if cancel is not None and cancel.is_set():
            cancelled = True
            break
        got_out, got_err = source.read(min(left, poll_s))
        out += got_out
        if got_err:
            err += got_err
            if on_stderr:
                on_stderr(got_err)
            if len(err) > 2 * STDERR_TAIL_BYTES:
                del err[:-STDERR_TAIL_BYTES]
        if len(out) > max_stdout:
            overflow = True
            break
    return Reading(bytes(out), bytes(err[-STDERR_TAIL_BYTES:]), timed_out, overflow, cancelled)
