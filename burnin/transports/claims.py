"""A local node's claim: which run is testing it, held without a descriptor per node.

A claim is a record file in the node's workdir, `.claim-<node>`, that names the run and
its holder: a lock file (`.holder-<pid>-<token>`) that the claiming process keeps locked
(flock) while it holds any claim in that workdir. One descriptor per workdir and run in
a process, however many nodes it holds: at 25,000 nodes a descriptor per node passed the
machine's open-files limit (benchmarks/RESULTS.md, "Claims and the open-files limit").

A record whose holder is no longer locked belongs to a run that ended without releasing
it (killed, crashed): the kernel dropped its flock with the process, so the claim is
taken over at once, never held forever. Claims in one workdir are taken and released
under `.claims.lock`, held only for that moment, so that two runs never both take a node.

Layer 3 (with the transports): imports only the standard library and burnin.transports.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

from burnin.transports import NodeBusy, NodeUnreachable

RECORD_MAX = 4096  # a record longer than this is not one of ours: read no more of it


@dataclass
class _Holder:
    """This process's lock for one (workdir, run): held while `claims` is not zero."""

    path: str
    fd: int
    claims: int = 0


_holders: dict[tuple[str, str], _Holder] = {}
_mutex = threading.Lock()  # _holders, and one claim at a time per process
_pending: deque[tuple[str, str, str]] = deque()  # release_later's, not yet done


def claim(workdir: str, name: str, run_id: str) -> None:
    """Take node `name` for run `run_id`. Another live run holding it raises NodeBusy,
    saying who and since when; this same run (another pytest-xdist worker, or a second
    transport of the run) goes on; a dead run's claim is taken over."""
    _drain()
    with _mutex, _claims_locked(workdir):
        ssh = _ssh_holder(os.path.join(workdir, f".lock-{name}"))
        if ssh is not None and not ssh.startswith(f"run {run_id} "):
            raise NodeBusy(f"under test by {ssh or 'another run'}")
        record = os.path.join(workdir, f".claim-{name}")
        who, theirs = _read(record)
        held = _holders.get((workdir, run_id))
        mine = os.path.basename(held.path) if held else None
        other = bool(theirs) and theirs != mine and _alive(os.path.join(workdir, theirs))
        if other and not who.startswith(f"run {run_id} "):
            raise NodeBusy(f"under test by {who or 'another run'}")
        holder = _holder(workdir, run_id)  # not before: a busy node makes none
        if not other:  # a live holder of this same run keeps its record
            _write(record, f"run {run_id} since {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on "
                           f"{socket.gethostname()}\n{os.path.basename(holder.path)}\n")
        holder.claims += 1


def release(workdir: str, name: str, run_id: str) -> None:
    """Give node `name` back (its record removed where it is still this process's);
    never raises: a record left behind is a dead holder's, taken over by the next run."""
    _drain()
    _release(workdir, name, run_id)


def release_later(workdir: str, name: str, run_id: str) -> None:
    """release(), from a finalizer: done by the next claim or release of the process.
    A finalizer may run inside claim() itself (a collection there), where taking the
    locks again would deadlock; a process that claims nothing more ends, and its claims
    with it (its holder's flock)."""
    _pending.append((workdir, name, run_id))


def _drain() -> None:
    while _pending:
        try:
            _release(*_pending.popleft())
        except IndexError:
            return  # another thread took the last one


def _release(workdir: str, name: str, run_id: str) -> None:
    try:
        with _mutex, _claims_locked(workdir):
            holder = _holders.get((workdir, run_id))
            if holder is None:
                return
            record = os.path.join(workdir, f".claim-{name}")
            if _read(record)[1] == os.path.basename(holder.path):
                os.unlink(record)
            holder.claims -= 1
            if holder.claims <= 0:
                del _holders[(workdir, run_id)]
                os.unlink(holder.path)
                os.close(holder.fd)
    except (OSError, NodeUnreachable):
        pass


def held_descriptors() -> int:
    """Descriptors this process holds for its claims (one per workdir and run)."""
    return len(_holders)


class _claims_locked:
    """`.claims.lock` in workdir, held (flock) for the `with`; its fd while held."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.fd = -1

    def __enter__(self) -> int:
        try:
            os.makedirs(self.workdir, mode=0o700, exist_ok=True)
            self.fd = os.open(os.path.join(self.workdir, ".claims.lock"),
                              os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as e:
            if self.fd >= 0:
                os.close(self.fd)
            raise NodeUnreachable(f"cannot take the node's claim in {self.workdir}: {e}") \
                from None
        return self.fd

    def __exit__(self, *exc) -> None:
        os.close(self.fd)  # releases the flock


def _holder(workdir: str, run_id: str) -> _Holder:
    """This process's holder for run_id in workdir, made and locked on first use."""
    held = _holders.get((workdir, run_id))
    if held is not None:
        return held
    path = os.path.join(workdir, f".holder-{os.getpid()}-{secrets.token_hex(6)}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise NodeUnreachable(f"cannot take the node's claim in {workdir}: {e}") from None
    fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else has it
    _holders[(workdir, run_id)] = held = _Holder(path, fd)
    return held


def _alive(holder: str) -> bool:
    """Whether some process still holds `holder` locked; a dead one's file is removed."""
    try:
        fd = os.open(holder, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: fail closed, the node stays busy
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    try:
        os.unlink(holder)
    except OSError:
        pass
    return False


def _ssh_holder(lock: str) -> str | None:
    """Who holds the node through the SSH transport's lock (burnin/transports/nodeside.py:
    a run that reaches this machine over SSH, in the same workdir), or None if nobody."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return ""  # cannot tell: fail closed, the node stays busy
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except OSError:
        return os.read(fd, 512).decode(errors="replace").strip()
    finally:
        os.close(fd)


def _read(record: str) -> tuple[str, str]:
    """(who: its first line, its holder's file name) of a claim record; ("", "") if none."""
    try:
        fd = os.open(record, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return "", ""
    except OSError as e:
        raise NodeUnreachable(f"cannot read the node's claim {record}: {e}") from None
    try:
        text = os.read(fd, RECORD_MAX).decode(errors="replace")
    finally:
        os.close(fd)
    who, _, rest = text.partition("\n")
    theirs = rest.strip()
    # A holder's name is a file name in the workdir, never a path elsewhere.
    if not theirs.startswith(".holder-") or "/" in theirs:
        theirs = ".holder-unknown" if who else ""
    return who.strip(), theirs


def _write(record: str, text: str) -> None:
    """The record, written under `.claims.lock` (every reader takes it too). Cut short by
    a crash, it names no live holder and is taken over."""
    try:
        fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise NodeUnreachable(f"cannot write the node's claim {record}: {e}") from None
