"""Opening an SSH connection to a node the way burnin trusts: strict host keys (the
node's, and a bastion's), key authentication only, a timeout on every step, an optional
ProxyJump through a bastion, and a dead link noticed within DEAD_LINK_S. Every refusal
is explained in words an operator can act on; hints are quoted for a shell.

What every connection of a run shares is read once (benchmarks/ssh_start_skew.py measured
why): the known_hosts file, indexed by host name (paramiko's SSHClient parses the whole
file for every connection, and its load is quadratic in the file's lines: 19 ms per
connection at 200 hosts, seconds at 10,000), and the private key. Both are read again
when their file changes. The checks themselves are paramiko's, unchanged: the node's
entries go into the client's host keys, and RejectPolicy refuses a host that has none.
"""

from __future__ import annotations

import errno
import hmac
import os
import shlex
import socket
import threading
from collections.abc import Callable
from typing import TypeVar, cast

import paramiko
from paramiko.hostkeys import HostKeyEntry

from burnin.model.nodes import Node
from burnin.transports import NodeUnreachable
from burnin.transports.sshbounds import bounded

KEEPALIVE_S = 5
# A link that goes silent is dead after this long: TCP keepalive probes an idle link, and
# TCP_USER_TIMEOUT bounds unacknowledged data (the heartbeat keeps some in flight). Then
# the connection fails and the node fails "connection lost", not at the probe's timeout.
DEAD_LINK_S = 30
# How often paramiko's thread for a connection wakes up, idle, to see whether it should
# stop (paramiko's default is 0.1 s: ten wake-ups a second per node, a core's worth at
# 10,000 nodes). Handshake time-outs are looked at on these wake-ups, which stay well
# within them. Once the connection is up, it wakes every KEEPALIVE_S (_keep_alive): to
# send a keepalive on a link idle that long (each wake-up cost 60 us of CPU per node
# every second; benchmarks/ssh_start_skew.py), and a close wakes it at once (hang_up).
ACTIVE_CHECK_S = 1.0
# How long a hang-up waits for the connection's thread to end (it is woken at once).
HANG_UP_JOIN_S = 2.0


def connect(node: Node) -> tuple[paramiko.SSHClient, list[paramiko.SSHClient]]:
    """(client to the node, clients to close with it: the bastion's, if any)."""
    ssh = node.ssh
    known_hosts = os.path.expanduser(ssh.known_hosts)
    key_file = os.path.expanduser(ssh.identity_file) if ssh.identity_file else None
    hops: list[paramiko.SSHClient] = []
    sock = None
    try:
        if ssh.proxy_jump:
            user, host, port = parse_jump(ssh.proxy_jump, ssh.user)
            bastion = _client(known_hosts, _host_key_name(host, port))
            hops.append(bastion)
            _open(bastion, host, port, user, key_file, known_hosts, ssh.connect_timeout_s,
                  f"bastion {host}:{port}")
            _keep_alive(bastion)
            try:
                with bounded(ssh.connect_timeout_s, lambda: hang_up(bastion)) as bound:
                    sock = transport_of(bastion).open_channel(
                        "direct-tcpip", (node.address, ssh.port), ("127.0.0.1", 0),
                        timeout=ssh.connect_timeout_s)
            except Exception as e:
                if bound.expired or "Timeout opening channel" in str(e):
                    raise NodeUnreachable(
                        f"no answer from bastion {host}:{port} within "
                        f"{ssh.connect_timeout_s:g} s to opening a tunnel to "
                        f"{node.address}:{ssh.port}: the bastion's sshd or the link to it "
                        "hung") from None
                raise NodeUnreachable(f"bastion {host}:{port} cannot reach "
                                      f"{node.address}:{ssh.port}: {e}") from None
        client = _client(known_hosts, _host_key_name(node.address, ssh.port))
        _open(client, node.address, ssh.port, ssh.user, key_file, known_hosts,
              ssh.connect_timeout_s, f"{node.address}:{ssh.port}", sock)
        if not hops:
            _keep_alive(client)
        return client, hops
    except BaseException:
        for h in hops:
            h.close()
        raise


def parse_jump(spec: str, default_user: str | None) -> tuple[str | None, str, int]:
    """'[user@]host[:port]' -> (user, host, port)."""
    user, _, rest = spec.rpartition("@")
    host, _, port = rest.partition(":")
    return (user or default_user), host, int(port) if port.isdigit() else 22


def _host_key_name(address: str, port: int) -> str:
    """The name known_hosts files (and paramiko's check) use for a host."""
    return address if port == 22 else f"[{address}]:{port}"


def _client(known_hosts: str, name: str) -> paramiko.SSHClient:
    """A client that knows `name`'s host keys from `known_hosts` (read-only: never written
    back) and refuses any host it has none for."""
    try:
        keys = _cached(known_hosts, KnownHosts)
    except FileNotFoundError:
        raise NodeUnreachable(f"known_hosts file {known_hosts} does not exist; host keys "
                              "are checked strictly") from None
    except (OSError, UnicodeError, paramiko.SSHException) as e:
        raise NodeUnreachable(f"cannot read known_hosts {known_hosts}: {e}") from None
    client = paramiko.SSHClient()
    for key in keys.lookup(name):
        client.get_host_keys().add(name, key.get_name(), key)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


class KnownHosts:
    """A known_hosts file, read the way paramiko's HostKeys reads it (the same line
    parser, the first key of a type for a host wins), indexed by host name. Hashed
    entries (`|1|salt|hash`) cannot be indexed: each lookup hashes the name once per
    hashed entry, as paramiko does."""

    def __init__(self, path: str):
        self.named: dict[str, list[tuple[int, paramiko.PKey]]] = {}
        self.hashed: list[tuple[int, str, paramiko.PKey]] = []
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    entry = HostKeyEntry.from_line(line, lineno)
                except paramiko.SSHException:
                    continue
                if entry is None:
                    continue
                for h in entry.hostnames:
                    if h.startswith("|1|"):
                        self.hashed.append((lineno, h, entry.key))
                    else:
                        self.named.setdefault(h, []).append((lineno, entry.key))

    def lookup(self, name: str) -> list[paramiko.PKey]:
        """`name`'s keys in file order, one per key type."""
        found = list(self.named.get(name, ()))
        found += [(n, key) for n, h, key in self.hashed
                  if hmac.compare_digest(paramiko.HostKeys.hash_host(name, h), h)]
        by_type: dict[str, paramiko.PKey] = {}
        for _, key in sorted(found, key=lambda f: f[0]):
            by_type.setdefault(key.get_name(), key)
        return list(by_type.values())


T = TypeVar("T")
_files: dict[tuple[str, Callable[[str], object]], tuple[tuple[int, ...], object]] = {}
_files_lock = threading.Lock()


def _cached(path: str, read: Callable[[str], T]) -> T:
    """read(path), again only when the file changed (size, time, inode), once per process
    whatever the number of threads asking."""
    with _files_lock:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        known = _files.get((path, read))
        if known is None or known[0] != stamp:
            known = _files[(path, read)] = (stamp, read(path))
        # A T by construction: what is kept under (path, read) is what read returned.
        return cast(T, known[1])


def _private_key(path: str) -> paramiko.PKey:
    try:
        return paramiko.PKey.from_path(path)
    except TypeError as e:  # cryptography's word for an encrypted key read without one
        if "password" not in str(e):
            raise
        raise paramiko.PasswordRequiredException(str(e)) from None


class _Transport(paramiko.Transport):
    _active_check_timeout = ACTIVE_CHECK_S  # paramiko's knob, read when it is made


def _open(client, address, port, user, key_file, known_hosts, timeout, where,
          sock=None) -> None:
    bound = None
    try:
        # The key is read once per run (paramiko reads the file once per connection, as
        # each of three key types in turn).
        key = _cached(key_file, _private_key) if key_file else None
        # paramiko bounds each step (TCP connect, banner, key exchange, each auth
        # request) by `timeout`; the watch bounds them all together by it, and any wait
        # of paramiko's that has no bound of its own (sshbounds.py).
        with bounded(timeout, lambda: hang_up(client)) as bound:
            client.connect(address, port=port, username=user, pkey=key,
                           allow_agent=key_file is None, look_for_keys=False,
                           timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                           channel_timeout=timeout, sock=sock, transport_factory=_Transport)
    except Exception as e:
        client.close()
        if bound is not None and bound.expired and not _before_connected(e):
            raise NodeUnreachable(f"unreachable: no answer from {where} within {timeout:g} s "
                                  "(connected, but the SSH handshake and login did not "
                                  "finish)") from None
        raise NodeUnreachable(explain(e, address, port, user, known_hosts, key_file,
                                      timeout, where)) from None


def _before_connected(e: Exception) -> bool:
    """Whether `e` came before there was a connection to hang up (the TCP connect, which
    paramiko bounds itself): explain() words those."""
    return isinstance(e, (socket.timeout, socket.gaierror,
                          paramiko.ssh_exception.NoValidConnectionsError))


def transport_of(client: paramiko.SSHClient) -> paramiko.Transport:
    """The client's connection; a client closed meanwhile (hung up by a bound, from another
    thread) has none, which says so rather than as an AttributeError on None."""
    t = client.get_transport()
    if t is None:
        raise paramiko.SSHException("the connection is closed")
    return t


def _keep_alive(client: paramiko.SSHClient) -> None:
    transport = transport_of(client)
    transport.set_keepalive(KEEPALIVE_S)
    s = transport.sock
    if not isinstance(s, socket.socket):
        return
    s.settimeout(KEEPALIVE_S)  # paramiko's thread: a keepalive is all it wakes up for
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_S), ("TCP_KEEPINTVL", KEEPALIVE_S),
                        ("TCP_KEEPCNT", DEAD_LINK_S // KEEPALIVE_S - 1),
                        ("TCP_USER_TIMEOUT", DEAD_LINK_S * 1000)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        try:
            s.setsockopt(level, option, value)
        except OSError:
            pass


def hang_up(client: paramiko.SSHClient) -> None:
    """Close the connection, its thread woken at once: paramiko closes the socket, which
    does not wake a thread waiting in recv() on it; shutting it down does."""
    t = client.get_transport()
    if t is not None and isinstance(t.sock, socket.socket):
        try:
            t.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    client.close()
    if t is not None and t is not threading.current_thread():
        # Its thread ends once it sees the socket shut: wait for it (bounded), so that
        # a run that closes connections as it goes holds no thread per node it closed.
        t.join(HANG_UP_JOIN_S)


def explain(e: Exception, address: str, port: int, user: str | None, known_hosts: str,
            key_file: str | None, timeout: float, where: str) -> str:
    host = address if port == 22 else f"[{address}]:{port}"
    if isinstance(e, paramiko.BadHostKeyException):
        return (f"host key CHANGED for {where}: it offers {e.key.get_name()} "
                f"{e.key.fingerprint}, {known_hosts} has {e.expected_key.fingerprint}. "
                f"If the node was reinstalled, check the new key and run "
                f"{shlex.join(['ssh-keygen', '-R', host, '-f', known_hosts])}, then add it")
    if isinstance(e, paramiko.SSHException) and "No authentication methods" in str(e):
        agent = os.environ.get("SSH_AUTH_SOCK")
        return (f"no key to log in to {where} with: identity_file is unset and the SSH "
                + (f"agent at {agent} holds no key" if agent else
                   "agent is not running (SSH_AUTH_SOCK unset)"))
    if isinstance(e, paramiko.SSHException) and "not found in known_hosts" in str(e):
        scan = f"{shlex.join(['ssh-keyscan', '-p', str(port), address])} >> " \
               f"{shlex.quote(known_hosts)}"
        return (f"host key of {where} is unknown: not in {known_hosts}. To accept it "
                f"deliberately, check its fingerprint and run {scan}")
    if isinstance(e, paramiko.PasswordRequiredException):
        return (f"identity file {key_file} is encrypted; load it into ssh-agent and "
                "leave identity_file unset")
    if isinstance(e, paramiko.AuthenticationException):
        how = f"key {key_file}" if key_file else "the keys of the SSH agent"
        return f"authentication refused by {where} for user {user or 'default'} with {how}"
    if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
        errs = {getattr(x, "errno", None) for x in e.errors.values()}
        if errs <= {errno.ECONNREFUSED}:
            return f"connection refused by {where} (is sshd running?)"
        return f"cannot connect to {where}: {e}"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return f"unreachable: no answer from {where} within {timeout:g} s"
    if isinstance(e, OSError) and e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return f"unreachable: {where}: {os.strerror(e.errno)}"
    if isinstance(e, FileNotFoundError):
        return f"identity file {key_file} does not exist"
    if isinstance(e, socket.gaierror):
        return f"cannot resolve {address}: {e}"
    return f"cannot connect to {where}: {type(e).__name__}: {e}"
