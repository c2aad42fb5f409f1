"""Opening an SSH connection to a node the way burnin trusts: strict host keys (the
node's, and a bastion's), key authentication only, a timeout on every step, an optional
ProxyJump through a bastion, and a dead link noticed within DEAD_LINK_S. Every refusal
is explained in words an operator can act on; hints are quoted for a shell."""

from __future__ import annotations

import errno
import os
import shlex
import socket

import paramiko

from burnin.nodes import Node
from burnin.transports import NodeUnreachable

KEEPALIVE_S = 5
# A link that goes silent is dead after this long: TCP keepalive probes an idle link, and
# TCP_USER_TIMEOUT bounds unacknowledged data (the heartbeat keeps some in flight). Then
# the connection fails and the node fails "connection lost", not at the probe's timeout.
DEAD_LINK_S = 30


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
            bastion = _client(known_hosts)
            hops.append(bastion)
            _open(bastion, host, port, user, key_file, known_hosts, ssh.connect_timeout_s,
                  f"bastion {host}:{port}")
            _keep_alive(bastion)
            try:
                sock = bastion.get_transport().open_channel(
                    "direct-tcpip", (node.address, ssh.port), ("127.0.0.1", 0),
                    timeout=ssh.connect_timeout_s)
            except Exception as e:
                raise NodeUnreachable(f"bastion {host}:{port} cannot reach "
                                      f"{node.address}:{ssh.port}: {e}") from None
        client = _client(known_hosts)
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


def _client(known_hosts: str) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    try:
        client.load_system_host_keys(known_hosts)  # read-only: never written back
    except FileNotFoundError:
        raise NodeUnreachable(f"known_hosts file {known_hosts} does not exist; host keys "
                              "are checked strictly") from None
    except (OSError, paramiko.SSHException) as e:
        raise NodeUnreachable(f"cannot read known_hosts {known_hosts}: {e}") from None
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


def _open(client, address, port, user, key_file, known_hosts, timeout, where,
          sock=None) -> None:
    try:
        client.connect(address, port=port, username=user, key_filename=key_file,
                       allow_agent=key_file is None, look_for_keys=False, timeout=timeout,
                       banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout,
                       sock=sock)
    except Exception as e:
        client.close()
        raise NodeUnreachable(explain(e, address, port, user, known_hosts, key_file,
                                      timeout, where)) from None


def _keep_alive(client: paramiko.SSHClient) -> None:
    transport = client.get_transport()
    transport.set_keepalive(KEEPALIVE_S)
    s = transport.sock
    if not isinstance(s, socket.socket):
        return
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
