"""Storage: `storage.path` exists, is on `storage.mount` (when set), and takes a small
write, fsync and read-back.

The file system may be a network one whose server is gone: a stat there can block in the
kernel for minutes. So the whole check runs in a child process (Python, isolated, no site)
that is killed at the deadline; the parent only waits, and never touches the path itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

from burnin.nodecheck import budget
from burnin.nodecheck.budget import KILL_MARGIN_S, remaining
from burnin.nodecheck.model import CheckResult, fail

CHECK = "storage"
PROBE_BYTES = 4096

# Runs in the child: argv = path, mount ('' when none), host, bytes; prints one JSON object.
CHILD = r"""
import json, os, sys
path, mount, host, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
out = {"problems": []}
def say(text):
    out["problems"].append(text)
try:
    if mount and not os.path.ismount(mount):
        say(f"storage.mount {mount} is not a mount point (not mounted)")
    elif not os.path.isdir(path):
        parent = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(parent) and not os.path.lexists(path):
            os.mkdir(path)  # as the storage check does: the last component, on purpose
        else:
            say(f"storage.path {path} does not exist (or is not a directory)")
    if not out["problems"]:
        if mount and (os.stat(path).st_dev != os.stat(mount).st_dev
                      or not os.path.realpath(path).startswith(
                          os.path.realpath(mount).rstrip("/") + "/")
                      and os.path.realpath(path) != os.path.realpath(mount)):
            say(f"storage.path {path} is not on storage.mount {mount}")
        else:
            name = os.path.join(path, f".burnin-node-check.{host}.{os.getpid()}")
            data = os.urandom(size)
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                with open(name, "rb") as f:
                    back = f.read()
                if back != data:
                    say(f"storage.path {path}: {len(data)} bytes written and fsynced read "
                        f"back different ({len(back)} bytes)")
            finally:
                try:
                    os.unlink(name)
                except OSError:
                    pass
except OSError as e:
    say(f"storage.path {path}: {e.strerror or e} ({type(e).__name__})")
print(json.dumps(out))
"""


def check(path: str, mount: str | None, host: str, deadline: float) -> CheckResult:
    """The storage check in a child process, bounded by `deadline`."""
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", CHILD, path, mount or "",
                                 host, str(PROBE_BYTES)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as e:
        return CheckResult(CHECK, (fail(CHECK, f"could not start its check: {e}"),))
    with budget.child(proc):
        try:
            out, err = proc.communicate(timeout=remaining(deadline - KILL_MARGIN_S))
        except subprocess.TimeoutExpired:
            proc.kill()  # a child blocked in the kernel dies when the call returns: not waited
            return CheckResult(CHECK, (fail(CHECK, f"storage.path {path} did not answer a stat, "
                                                   "write, fsync and read-back within the time "
                                                   "budget (a hung file system?)"),),
                               finished=False)
    try:
        problems = json.loads(out)["problems"]
    except (ValueError, KeyError, TypeError):
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return CheckResult(CHECK, (fail(CHECK, f"its check exited {proc.returncode}: "
                                               f"{tail[0]}"),))
    return CheckResult(CHECK, tuple(fail(CHECK, p) for p in problems))
