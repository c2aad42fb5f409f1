"""What one node-check leaves for the next, in `node_check.state_dir`: the kernel log cursor
(so an old XID is reported once), the host's figures at its last clean check, and the
events that hold its drain until a person resumes the node or it reboots. One small JSON
file, replaced atomically, read and written under a lock with a bound (a Prolog and the
HealthCheckProgram may run at once).

node-check runs as root: its state directory is its own (created 0700), verified on every
run (its owner the user node-check runs as, no group or other write, nor on the
directories above it: burnin/core/rootfiles.py), and its files are opened without
following links, the temporary one made by mkstemp. What is read is validated: a file of
the wrong shape is said (`problem`), never used."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import stat
import tempfile
import time
from pathlib import Path

from burnin.core.rootfiles import untrusted
from burnin.errors import StateError

FILE = "node-check.json"
LOCK = "node-check.lock"
VERSION = 1
MAX_BYTES = 256 * 1024   # what one file of at most MAX_HELD lines takes, with room
MAX_HELD = 20            # held events kept (the newest)
MAX_LINE = 2048          # characters of one held event
LAST_GOOD = ("gpus", "cpus", "memory_bytes")  # what gpu.py and host.py keep
KEYS = {"version", "boot_id", "cursor", "held", "last_good"}
NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read(64).strip()
    except OSError:
        return ""


def ready(state_dir: Path) -> None:
    """Make the state directory (0700, its parents 0755) where it is missing, and verify it:
    a real directory, owned by this user, written by nobody else, on a path nobody else
    can change. StateError says what is wrong and how to fix it."""
    try:
        state_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        with contextlib.suppress(FileExistsError):
            state_dir.mkdir(mode=0o700)
        st = os.lstat(state_dir)
    except OSError as e:
        raise StateError(f"state directory {state_dir}: {e.strerror or e}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise StateError(f"state directory {state_dir} is not a directory (a symbolic "
                         "link or a file); remove it and node-check makes its own")
    problem = untrusted(state_dir, os.geteuid())
    if problem:
        raise StateError(f"state directory {state_dir} is not node-check's own: {problem}; "
                         f"not used (fix: chown {os.geteuid()} and chmod 700 it, or remove "
                         "it and node-check makes its own)")


@contextlib.contextmanager
def locked(state_dir: Path, deadline: float):
    """Hold the state directory's lock until the block ends; StateError past `deadline`."""
    ready(state_dir)
    try:
        fd = os.open(state_dir / LOCK, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
    except OSError as e:
        raise StateError(f"{state_dir / LOCK}: {e.strerror or e}") from None
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise StateError(f"{state_dir / LOCK}: {e.strerror or e}") from None
                if time.monotonic() > deadline:
                    raise StateError(f"{state_dir / LOCK}: held by another node-check past "
                                     "the time budget") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def load(state_dir: Path) -> tuple[dict, str]:
    """(the last node-check's state, '') from this boot; ({'last_good'}, '') from another
    boot (kernel log times and held events mean nothing across a reboot); ({}, '') when
    there is none; ({}, why) when the file cannot be read or is not what node-check
    writes. Call under `locked`."""
    path = state_dir / FILE
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        return {}, ""
    except OSError as e:
        return {}, f"{path} cannot be read: {e.strerror or e}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}, f"{path} is not a regular file"
        raw = os.read(fd, MAX_BYTES + 1)
    except OSError as e:
        return {}, f"{path} cannot be read: {e.strerror or e}"
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        return {}, f"{path} is larger than {MAX_BYTES} bytes"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return {}, f"{path} is not JSON ({e})"
    problem = _invalid(data)
    if problem:
        return {}, f"{path}: {problem}"
    if data["boot_id"] != boot_id():
        return {"last_good": data["last_good"]}, ""
    return {k: data[k] for k in ("cursor", "held", "last_good")}, ""


def _invalid(data) -> str:
    """What makes `data` other than what save() writes, or ''."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("version") != VERSION:
        return f"version {data.get('version')!r}, expected {VERSION}"
    if set(data) != KEYS:
        return f"keys {sorted(map(str, data))}, expected {sorted(KEYS)}"
    if not isinstance(data["boot_id"], str):
        return "boot_id is not a string"
    cursor = data["cursor"]
    if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, (int, float))
                               or not math.isfinite(cursor) or cursor < 0):
        return f"cursor {cursor!r} is not a time since boot"
    held = data["held"]
    if not isinstance(held, list) or len(held) > MAX_HELD or not all(
            isinstance(h, str) and 0 < len(h) <= MAX_LINE for h in held):
        return f"held is not a list of at most {MAX_HELD} event lines"
    good = data["last_good"]
    if not isinstance(good, dict) or not set(good) <= set(LAST_GOOD) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in good.values()):
        return f"last_good is not a mapping of {', '.join(LAST_GOOD)} to counts"
    return ""


def save(state_dir: Path, data: dict) -> None:
    """Replace the state file with `data` (cursor, held, last_good). Call under `locked`."""
    path = state_dir / FILE
    body = json.dumps({"cursor": data.get("cursor"), "held": list(data.get("held") or []),
                       "last_good": dict(data.get("last_good") or {}), "version": VERSION,
                       "boot_id": boot_id()}, sort_keys=True)
    problem = _invalid(json.loads(body))
    if problem:  # never write what the next node-check would refuse
        raise StateError(f"{path}: not saved, {problem}")
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{FILE}.", suffix=".tmp", dir=state_dir)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise StateError(f"{path}: {e.strerror or e}") from None
