"""The ssh transport, on paramiko: key authentication, strict host keys, a timeout on
everything, one connection per node per run, probes staged once over SFTP into a
private directory that is removed at the end.

Remote command lines are built from argv lists with shlex; no inventory value is ever
pasted into a shell line unquoted.
"""

from __future__ import annotations

import errno
import os
import secrets
import select
import shlex
import socket
import threading
import time
from pathlib import Path

import paramiko

from burnin.transports import (
    HEARTBEAT_S,
    STDERR_TAIL_BYTES,
    CommandResult,
    NodeUnreachable,
    Transport,
)

PID_MARK = b"BURNIN_PID "
KILL_GRACE_S = 2
KEEPALIVE_S = 5
STAGE_TIMEOUT_S = 60


class SshTransport(Transport):
    def __init__(self, node, probes_dir: Path):
        super().__init__(node, probes_dir)
        self._client: paramiko.SSHClient | None = None
        self._staged: str | None = None
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return f"{self.node.address}:{self.node.ssh.port}"

    # --- connection ---------------------------------------------------------------

    def _connect(self) -> paramiko.SSHClient:
        if self._client is not None and self._client.get_transport() is not None \
                and self._client.get_transport().is_active():
            return self._client
        self._client = None
        ssh = self.node.ssh
        known_hosts = os.path.expanduser(ssh.known_hosts)
        client = paramiko.SSHClient()
        try:
            client.load_system_host_keys(known_hosts)  # read-only: never written back
        except FileNotFoundError:
            raise NodeUnreachable(f"known_hosts file {known_hosts} does not exist; host keys "
                                  "are checked strictly") from None
        except (OSError, paramiko.SSHException) as e:
            raise NodeUnreachable(f"cannot read known_hosts {known_hosts}: {e}") from None
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        key_file = os.path.expanduser(ssh.identity_file) if ssh.identity_file else None
        timeout = ssh.connect_timeout_s
        try:
            client.connect(self.node.address, port=ssh.port, username=ssh.user,
                           key_filename=key_file, allow_agent=key_file is None,
                           look_for_keys=False, timeout=timeout, banner_timeout=timeout,
                           auth_timeout=timeout, channel_timeout=timeout)
        except Exception as e:
            client.close()
            raise NodeUnreachable(self._explain(e, known_hosts, key_file)) from None
        client.get_transport().set_keepalive(KEEPALIVE_S)
        self._client = client
        return client

    def _explain(self, e: Exception, known_hosts: str, key_file: str | None) -> str:
        where, ssh = self.where, self.node.ssh
        host = self.node.address if ssh.port == 22 else f"[{self.node.address}]:{ssh.port}"
        if isinstance(e, paramiko.BadHostKeyException):
            return (f"host key CHANGED for {where}: it offers {e.key.get_name()} "
                    f"{e.key.fingerprint}, {known_hosts} has {e.expected_key.fingerprint}. "
                    f"If the node was reinstalled, check the new key and run "
                    f"ssh-keygen -R '{host}' -f {known_hosts}, then add it")
        if isinstance(e, paramiko.SSHException) and "No authentication methods" in str(e):
            agent = os.environ.get("SSH_AUTH_SOCK")
            return (f"no key to log in to {where} with: identity_file is unset and the SSH "
                    + (f"agent at {agent} holds no key" if agent else
                       "agent is not running (SSH_AUTH_SOCK unset)"))
        if isinstance(e, paramiko.SSHException) and "not found in known_hosts" in str(e):
            return (f"host key of {where} is unknown: not in {known_hosts}. To accept it "
                    f"deliberately, check its fingerprint and run "
                    f"ssh-keyscan -p {ssh.port} {self.node.address} >> {known_hosts}")
        if isinstance(e, paramiko.PasswordRequiredException):
            return (f"identity file {key_file} is encrypted; load it into ssh-agent and "
                    "leave identity_file unset")
        if isinstance(e, paramiko.AuthenticationException):
            how = f"key {key_file}" if key_file else "the keys of the SSH agent"
            return f"authentication refused by {where} for user {ssh.user or 'default'} " \
                   f"with {how}"
        if isinstance(e, paramiko.ssh_exception.NoValidConnectionsError):
            errs = {getattr(x, "errno", None) for x in e.errors.values()}
            if errs <= {errno.ECONNREFUSED}:
                return f"connection refused by {where} (is sshd running?)"
            return f"cannot connect to {where}: {e}"
        if isinstance(e, (socket.timeout, TimeoutError)):
            return f"unreachable: no answer from {where} within {ssh.connect_timeout_s:g} s"
        if isinstance(e, OSError) and e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return f"unreachable: {where}: {os.strerror(e.errno)}"
        if isinstance(e, FileNotFoundError):
            return f"identity file {key_file} does not exist"
        if isinstance(e, socket.gaierror):
            return f"cannot resolve {self.node.address}: {e}"
        return f"cannot connect to {where}: {type(e).__name__}: {e}"

    # --- staging ------------------------------------------------------------------

    def _stage(self, client: paramiko.SSHClient) -> str:
        """Copy probes/ once per run into a new 0700 directory under workdir."""
        if self._staged:
            return self._staged
        workdir = self.node.workdir
        target = f"{workdir.rstrip('/')}/burnin-{secrets.token_hex(6)}"
        try:
            sftp = client.open_sftp()
            # A node that stops answering mid-transfer must not hold the run.
            sftp.get_channel().settimeout(STAGE_TIMEOUT_S)
        except Exception as e:
            raise NodeUnreachable(f"SFTP refused by {self.where}: {e}") from None
        try:
            _makedirs(sftp, workdir)
            sftp.mkdir(target, 0o700)
            sftp.chmod(target, 0o700)  # mkdir's mode passes through the remote umask
            self._staged = target
            for probe in sorted(self.probes_dir.glob("*.py")):
                sftp.put(str(probe), f"{target}/{probe.name}")
        except (OSError, paramiko.SSHException, TimeoutError) as e:
            raise NodeUnreachable(f"cannot stage probes into {target} on {self.where}: "
                                  f"{e}") from None
        finally:
            sftp.close()
        return target

    def probe_command(self, probe: str) -> list[str]:
        with self._lock:
            staged = self._stage(self._connect())
        return [self.python, f"{staged}/{probe}.py"]

    # --- commands -----------------------------------------------------------------

    def run(self, argv, stdin, timeout_s, max_stdout, on_stderr=None, lifeline=False,
            cancel=None):
        client = self._connect()
        # sshd makes the remote shell a session leader, so its PID is the probe's process
        # group, which a second channel kills at the timeout. The shell waits for the probe
        # and exits with $? (128+N for signal N): paramiko drops sshd's exit-signal.
        line = f"echo {PID_MARK.decode()}$$ >&2; {shlex.join(argv)}; exit $?"
        start = time.monotonic()
        try:
            chan = client.get_transport().open_session(timeout=self.node.ssh.connect_timeout_s)
            chan.exec_command(line)
        except Exception as e:
            self._client = None
            raise NodeUnreachable(f"cannot start a command on {self.where}: {e}") from None
        threading.Thread(target=_feed, args=(chan, stdin, lifeline), daemon=True).start()
        out, err = bytearray(), bytearray()
        timed_out = overflow = cancelled = False
        deadline = start + timeout_s
        try:
            while not (chan.exit_status_ready() and chan.eof_received
                       and not chan.recv_ready() and not chan.recv_stderr_ready()):
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                select.select([chan], [], [], min(left, 1.0))
                while chan.recv_ready():
                    out += chan.recv(1 << 16)
                while chan.recv_stderr_ready():
                    chunk = chan.recv_stderr(1 << 16)
                    err += chunk
                    if on_stderr:
                        on_stderr(chunk)
                    if len(err) > 2 * STDERR_TAIL_BYTES:
                        del err[len(PID_MARK) + 16:-STDERR_TAIL_BYTES]
                if len(out) > max_stdout:
                    overflow = True
                    break
                if chan.closed or not client.get_transport().is_active():
                    break
            pid, err = _split_pid(bytes(err))
            if timed_out or overflow or cancelled:
                self._kill_group(pid)
            elif chan.recv_exit_status() == -1:
                # Closed with no exit status: sshd or the link went away under the probe.
                self._client = None
                raise NodeUnreachable(f"connection to {self.where} lost after "
                                      f"{time.monotonic() - start:.0f} s while the probe ran")
            return CommandResult(
                exit_code=None if timed_out or overflow or cancelled
                else chan.recv_exit_status(),
                stdout=bytes(out[:max_stdout]), stderr_tail=err[-STDERR_TAIL_BYTES:],
                duration_s=time.monotonic() - start, timed_out=timed_out, overflow=overflow,
                cancelled=cancelled)
        finally:
            chan.close()

    def _kill_group(self, pid: int | None) -> None:
        if pid is None:
            return
        group = f"-{pid}"
        line = (f"kill -TERM -- {group} 2>/dev/null; sleep {KILL_GRACE_S}; "
                f"kill -KILL -- {group} 2>/dev/null; true")
        self._quiet(self._client, line, KILL_GRACE_S + self.node.ssh.connect_timeout_s)

    def _quiet(self, client: paramiko.SSHClient, line: str, timeout_s: float) -> None:
        """Run a housekeeping command, bounded, ignoring its result."""
        try:
            chan = client.get_transport().open_session(
                timeout=self.node.ssh.connect_timeout_s)
            chan.exec_command(line)
            chan.status_event.wait(timeout_s)  # recv_exit_status() would wait forever
            chan.close()
        except Exception:
            pass

    def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        if self._staged and client.get_transport() and client.get_transport().is_active():
            self._quiet(client, shlex.join(["rm", "-rf", "--", self._staged]),
                        self.node.ssh.connect_timeout_s)
        self._staged = None
        client.close()


def _feed(chan: paramiko.Channel, data: bytes, lifeline: bool) -> None:
    """Write the settings; with a lifeline, then a heartbeat until the channel closes.
    If the controller dies, sshd closes the probe's stdin and the probe stops itself."""
    try:
        chan.sendall(data + b"\n" if lifeline else data)
        while lifeline and not chan.closed and not chan.exit_status_ready():
            chan.status_event.wait(HEARTBEAT_S)
            if not chan.exit_status_ready():
                chan.sendall(b"\n")
        chan.shutdown_write()
    except Exception:
        pass  # the probe exited without reading; its exit status says the rest


def _makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    """mkdir -p over SFTP; a directory made meanwhile by another node sharing this
    file system (an NFS home, say) is fine."""
    current = "/" if path.startswith("/") else ""
    for part in (p for p in path.split("/") if p):
        current = f"{current}/{part}" if current not in ("", "/") else f"{current}{part}"
        try:
            sftp.stat(current)
        except FileNotFoundError:
            try:
                sftp.mkdir(current)
            except OSError:
                sftp.stat(current)  # raises unless someone else made it


def _split_pid(err: bytes) -> tuple[int | None, bytes]:
    if err.startswith(PID_MARK):
        line, _, rest = err.partition(b"\n")
        try:
            return int(line[len(PID_MARK):]), rest
        except ValueError:
            pass
    return None, err
