"""What root may trust: a file it reads as its instructions (an inventory) or runs (scontrol,
dcgmi, a command hook) only where nobody but root can change it; a directory it keeps
state in only where nobody but root can write.

A file is root's when it is owned by root and writable by neither group nor others, and
every directory on its way from / (symbolic links followed, each link itself root's) is
owned by root and writable by group or others only with the sticky bit (/tmp), which
keeps others from renaming what is not theirs. Anything else lets another local user
swap what root reads or runs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_LINKS = 40  # as the kernel's own bound on links followed in one lookup


def running_as_root() -> bool:
    return os.geteuid() == 0


def _owner(uid: int) -> str:
    try:
        import pwd
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):o}"


def untrusted(path: str | Path, owner: int = 0) -> str:
    """Why `path` (a file, or a directory) is not `owner`'s alone, or '' when it is: owned
    by `owner`, on a way of directories and links owned by root or `owner`. A path that
    does not exist is '' (the caller says what is missing)."""
    todo = [p for p in str(os.path.abspath(path)).split("/") if p]
    current = "/"
    links = 0
    try:
        st = os.lstat(current)
    except OSError as e:
        return f"/ cannot be read: {e.strerror or e}"
    problem = _directory(current, st, owner)
    if problem:
        return problem
    while todo:
        part = todo.pop(0)
        if part == ".":
            continue
        if part == "..":
            current = os.path.dirname(current) or "/"
            continue
        nxt = os.path.join(current, part)
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            return ""
        except OSError as e:
            return f"{nxt} cannot be read: {e.strerror or e}"
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (0, owner):
                return f"{nxt} is a symbolic link owned by {_owner(st.st_uid)}"
            links += 1
            if links > MAX_LINKS:
                return f"{path}: too many symbolic links"
            target = os.readlink(nxt)
            if target.startswith("/"):
                current = "/"
            todo = [p for p in target.split("/") if p] + todo
            continue
        current = nxt
        if stat.S_ISDIR(st.st_mode) and todo:
            problem = _directory(current, st, owner)
        else:
            problem = _leaf(current, st, owner)
        if problem:
            return problem
    return ""


def _directory(where: str, st: os.stat_result, owner: int) -> str:
    if st.st_uid not in (0, owner):  # root's directories are everyone's way
        return f"{where} is owned by {_owner(st.st_uid)}"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"{where} is writable by group or others (mode {_mode(st)})"
    return ""


def _leaf(where: str, st: os.stat_result, owner: int) -> str:
    if st.st_uid != owner:
        return f"{where} is owned by {_owner(st.st_uid)}"
    if st.st_mode & 0o022:
        return f"{where} is writable by group or others (mode {_mode(st)})"
    return ""


def refusal(what: str, path: str | Path, problem: str) -> str:
    """The message for a file root will not trust, with how to fix it."""
    return (f"refusing {what} {path} as root: {problem}; root reads and runs only files "
            f"owned by root that nobody else can write (fix: chown root:root on it and "
            f"on the directories above it, and chmod go-w)")
