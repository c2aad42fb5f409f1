"""A second real local account for a test: another user who owns a file root is asked to
trust, or who writes where root keeps its state. Made with useradd, removed afterwards.

    with local_user() as (uid, gid): ...
    as_user(uid, gid, ["sh", "-c", "..."])   # a real process with that uid
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator

from support.requires import need


def _cannot() -> str:
    if os.geteuid() != 0:
        return "creating an account needs root"
    missing = [t for t in ("useradd", "userdel") if not shutil.which(t)]
    return f"missing tools: {', '.join(missing)} (apt-get install passwd)" if missing else ""


@contextlib.contextmanager
def local_user(prefix: str = "bnc") -> Iterator[tuple[int, int]]:
    """(uid, gid) of a new system account with no home and no login shell."""
    need(_cannot())
    name = f"{prefix}{os.getpid() % 100000}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell",
                    "/usr/sbin/nologin", name], check=True, capture_output=True, timeout=60)
    try:
        entry = pwd.getpwnam(name)
        yield entry.pw_uid, entry.pw_gid
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=60)


def as_user(uid: int, gid: int, argv: list[str], **kw) -> subprocess.CompletedProcess:
    """argv run by that account (what a hostile local user can do)."""
    return subprocess.run(argv, user=uid, group=gid, extra_groups=[], capture_output=True,
                          text=True, timeout=60, **kw)


@contextlib.contextmanager
def reachable_dir() -> Iterator:
    """A directory of root's that another account can reach (pytest's tmp_path is under
    a 0700 directory of root's), removed afterwards."""
    import tempfile
    from pathlib import Path
    where = Path(tempfile.mkdtemp(prefix="burnin-user-"))
    where.chmod(0o755)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)
