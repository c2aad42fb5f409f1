"""A real SSH peer that wedges: paramiko's server side on a loopback port, which checks the
client's key for real and then never answers one request.

    with WedgedPeer(tmp_path, client_pub, hang_at="exec") as peer:
        peer.known_hosts_line  # "[127.0.0.1]:PORT ssh-ed25519 ..."
        peer.held.wait(...)    # set once the request it never answers has come

`hang_at`: "session" (the channel open is never answered: a session, or a bastion's
tunnel) or "exec" (the session opens,
the exec request is never answered). What a hung sshd looks like from the client: the
TCP connection stays up, keepalives are acknowledged by the kernel, no reply ever comes.
Teardown lets the held requests go and closes everything.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import paramiko

HANGS = ("session", "exec")


class _Wedged(paramiko.ServerInterface):
    def __init__(self, peer: WedgedPeer):
        self.peer = peer

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        ok = key.get_base64() == self.peer.client_blob
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        if self.peer.hang_at == "session":
            self.peer.hold()
        return paramiko.OPEN_SUCCEEDED

    def check_channel_direct_tcpip_request(self, chanid, origin, destination):
        if self.peer.hang_at == "session":  # a bastion's tunnel: a channel open too
            self.peer.hold()
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        if self.peer.hang_at == "exec":
            self.peer.hold()
        return False


class WedgedPeer:
    __test__ = False

    def __init__(self, workdir: Path, client_pub: Path, hang_at: str,
                 address: str = "127.0.0.1"):
        assert hang_at in HANGS, hang_at
        self.hang_at = hang_at
        self.client_blob = Path(client_pub).read_text().split()[1]
        key_file = Path(workdir) / f"wedged_host_key_{hang_at}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_file)],
                       check=True, capture_output=True, timeout=60)
        self.host_key = paramiko.Ed25519Key.from_private_key_file(str(key_file))
        self.listener = socket.create_server((address, 0))
        self.address, self.port = address, self.listener.getsockname()[1]
        self.known_hosts_line = (f"[{address}]:{self.port} {self.host_key.get_name()} "
                                 f"{self.host_key.get_base64()}")
        self.held = threading.Event()  # a request came that is never answered
        self.released = threading.Event()
        self.transports: list[paramiko.Transport] = []
        self.thread = threading.Thread(target=self._accept, daemon=True, name="wedged-peer")

    def __enter__(self) -> WedgedPeer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()
        self.listener.close()
        for t in self.transports:
            t.close()

    def hold(self) -> None:
        self.held.set()
        self.released.wait()

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
                t.start_server(server=_Wedged(self))
            except Exception:
                t.close()
