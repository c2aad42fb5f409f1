"""The SSH channel as the read loop's source: what a command wrote before its channel
closed is read, however soon it closed (a probe whose interpreter is missing exits at
once, and its stderr is the only reason the operator gets)."""

from __future__ import annotations

import os
import time

from burnin.transports.reading import read_bounded
from burnin.transports.sshchannel import ChannelSource


class ClosedChannel:
    """A paramiko channel's state after a command that printed and exited at once: closed,
    the link gone, its stderr still in the channel's buffer."""

    def __init__(self, stderr: bytes):
        self.err = bytearray(stderr)
        self.closed, self.eof_received = True, True
        self.rfd, wfd = os.pipe()  # readable at once, as select sees a closed channel
        os.write(wfd, b"x")
        os.close(wfd)

    def fileno(self) -> int:
        return self.rfd

    def recv_ready(self) -> bool:
        return False

    def recv_stderr_ready(self) -> bool:
        return bool(self.err)

    def recv_stderr(self, n: int) -> bytes:
        chunk, self.err[:] = bytes(self.err[:n]), self.err[n:]
        return chunk

    def exit_status_ready(self) -> bool:
        return True


class GoneClient:
    def get_transport(self):
        return self

    def is_active(self) -> bool:
        return False


def test_stderr_buffered_in_a_channel_closed_at_once_is_read():
    chan = ClosedChannel(b"bash: /opt/py; touch x: No such file or directory\n")
    got = read_bounded(ChannelSource(chan, GoneClient()), time.monotonic() + 5, 1 << 20)
    assert got.stderr_tail == b"bash: /opt/py; touch x: No such file or directory\n"
    assert not got.stopped
    os.close(chan.rfd)
