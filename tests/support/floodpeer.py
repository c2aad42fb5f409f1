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

import socket
import subprocess
import threading
from pathlib import Path

import paramiko

AT = ("ready", "staged")
CHUNK = b"x" * 32768


class _Flooding(paramiko.ServerInterface):
    def __init__(self, peer: FloodPeer):
        self.peer = peer

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        ok = key.get_base64() == self.peer.client_blob
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel, command):
        threading.Thread(target=self.peer.flood, args=(channel,), daemon=True,
                         name="flood-peer-writer").start()
        return True


class FloodPeer:
    __test__ = False

    def __init__(self, workdir: Path, client_pub: Path, at: str):
        assert at in AT, at
        self.at = at
        self.client_blob = Path(client_pub).read_text().split()[1]
        key_file = Path(workdir) / f"flood_host_key_{at}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_file)],
                       check=True, capture_output=True, timeout=60)
        self.host_key = paramiko.Ed25519Key.from_private_key_file(str(key_file))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.known_hosts_line = (f"[127.0.0.1]:{self.port} {self.host_key.get_name()} "
                                 f"{self.host_key.get_base64()}")
        self.sent = 0
        self.stop = threading.Event()
        self.transports: list[paramiko.Transport] = []
        self.thread = threading.Thread(target=self._accept, daemon=True, name="flood-peer")

    def __enter__(self) -> FloodPeer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.listener.close()
        for t in self.transports:
            t.close()

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
                chan.sendall(CHUNK)
                self.sent += len(CHUNK)
        except Exception:
            pass  # the client hung up: what the test wants

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed at teardown
            t = paramiko.Transport(conn)
            t.add_server_key(self.host_key)
            self.transports.append(t)
            try:
                t.start_server(server=_Flooding(self))
            except Exception:
                t.close()
