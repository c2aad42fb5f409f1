"""A real SSH peer whose holder never ends its line: paramiko's server side on a loopback
port, which checks the client's key for real, accepts the command that holds the node and
then prints one line without end, as fast as the connection takes it.

    with FloodPeer(tmp_path, client_pub, at="ready") as peer:
        peer.known_hosts_line  # "[127.0.0.1]:PORT ssh-ed25519 ..."
        peer.sent              # bytes written so far

`at`: "ready" (the first line never ends) or "staged" (it says `ready <dir>`, reads the
probes, then the line that should say `staged <n>` never ends). Teardown stops the writer
and closes everything.
"""

from __future__ import annotations

import threading
from pathlib import Path

import paramiko

from support.wedgedpeer import KeyAuth, PeerServer

AT = ("ready", "staged")
CHUNK = b"x" * 32768


class _Flooding(KeyAuth):
    peer: FloodPeer

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel, command):
        threading.Thread(target=self.peer.flood, args=(channel,), daemon=True,
                         name="flood-peer-writer").start()
        return True


class FloodPeer(PeerServer):
    interface = _Flooding

    def __init__(self, workdir: Path, client_pub: Path, at: str):
        assert at in AT, at
        self.at = at
        self.sent = 0
        self.stop = threading.Event()
        super().__init__(workdir, client_pub, f"flood_host_key_{at}")

    def let_go(self) -> None:
        self.stop.set()

    def flood(self, chan: paramiko.Channel) -> None:
        try:
            if self.at == "staged":
                chan.sendall(b"ready /tmp/burnin-flood\n")
                head = b""
                while not head.endswith(b"\n"):
                    head += chan.recv(1)
                want = int(head.split()[1])
                while want > 0 and not self.stop.is_set():
                    want -= len(chan.recv(min(want, 1 << 16)))
            while not self.stop.is_set():
                # Counted per send, which returns once its bytes are queued: the client
                # cannot have read a byte that this count has not yet been told of for long.
                self.sent += chan.send(CHUNK)
        except Exception:
            pass  # the client hung up: what the test wants
