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


class KeyAuth(paramiko.ServerInterface):
    """A server side that lets in the one client key its peer was given, for real."""

    def __init__(self, peer: PeerServer):
        self.peer = peer

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        ok = key.get_base64() == self.peer.client_blob
        return paramiko.AUTH_SUCCESSFUL if ok else paramiko.AUTH_FAILED


class PeerServer:
    """paramiko's server side on a loopback port with a host key of its own: what a test
    peer needs besides its ServerInterface (`interface`), which a subclass gives."""
    __test__ = False
    interface: type[KeyAuth] = KeyAuth

    def __init__(self, workdir: Path, client_pub: Path, key_name: str,
                 address: str = "127.0.0.1"):
        self.client_blob = Path(client_pub).read_text().split()[1]
        key_file = Path(workdir) / key_name
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_file)],
                       check=True, capture_output=True, timeout=60)
        self.host_key = paramiko.Ed25519Key.from_private_key_file(str(key_file))
        self.listener = socket.create_server((address, 0))
        self.address, self.port = address, self.listener.getsockname()[1]
        self.known_hosts_line = (f"[{address}]:{self.port} {self.host_key.get_name()} "
                                 f"{self.host_key.get_base64()}")
        self.transports: list[paramiko.Transport] = []
        self.thread = threading.Thread(target=self._accept, daemon=True,
                                       name=type(self).__name__)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.let_go()
        self.listener.close()
        for t in self.transports:
            t.close()

    def let_go(self) -> None:
        """At teardown, before the connections close: whatever the peer holds, let it go."""

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
                t.start_server(server=self.interface(self))
            except Exception:
                t.close()


class _Wedged(KeyAuth):
    peer: WedgedPeer

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


class WedgedPeer(PeerServer):
    interface = _Wedged

    def __init__(self, workdir: Path, client_pub: Path, hang_at: str,
                 address: str = "127.0.0.1"):
        assert hang_at in HANGS, hang_at
        self.hang_at = hang_at
        self.held = threading.Event()  # a request came that is never answered
        self.released = threading.Event()
        super().__init__(workdir, client_pub, f"wedged_host_key_{hang_at}", address)

    def let_go(self) -> None:
        self.released.set()

    def hold(self) -> None:
        self.held.set()
        self.released.wait()
