"""What one node-check leaves for the next, in `workdir`: the kernel log cursor (so an
old XID is reported once), the host's figures at its last clean check, and the events that
hold its drain until the next boot. One small JSON file, replaced atomically, read and
written under a lock with a bound (a Prolog and the HealthCheckProgram may run at once)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from pathlib import Path

from burnin.errors import StateError

FILE = "node-check.json"
LOCK = "node-check.lock"
VERSION = 1


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read(64).strip()
    except OSError:
        return ""


@contextlib.contextmanager
def locked(workdir: Path, deadline: float):
    """Hold the workdir's lock until the block ends; StateError past `deadline`."""
    try:
        workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(workdir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise StateError(f"{workdir}: {e.strerror or e}") from None
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise StateError(f"{workdir / LOCK}: {e.strerror or e}") from None
                if time.monotonic() > deadline:
                    raise StateError(f"{workdir / LOCK}: held by another node-check past "
                                     "the time budget") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def load(workdir: Path) -> dict:
    """The last node-check's state; {} when there is none, or it is from another boot
    (kernel log times and held events mean nothing across a reboot)."""
    try:
        data = json.loads((workdir / FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        # Unreadable state is not the node's fault: start over, as on a first check.
        return {"_unreadable": f"{workdir / FILE}: {e}"}
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return {}
    if data.get("boot_id") != boot_id():
        return {"last_good": data.get("last_good") or {}}
    return data


def save(workdir: Path, data: dict) -> None:
    path = workdir / FILE
    tmp = path.with_name(f".{FILE}.{os.getpid()}")
    body = json.dumps({**data, "version": VERSION, "boot_id": boot_id()}, sort_keys=True)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StateError(f"{path}: {e.strerror or e}") from None
