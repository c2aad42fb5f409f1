"""What runs on a node for the transports themselves (not a probe): Python source handed
to the node's interpreter, standard library only.

SAFE_WORKDIR defines `unsafe_workdir(workdir)`: why probes may not be staged in workdir,
or "" (it makes the missing parts, 0700). Safe: every existing component of the workdir's
path is owned by root or the login user and writable by no one else unless sticky (/tmp);
the workdir itself is a real directory (never a symlink) of the login user's, writable by
no one else. Anything else would let another local user swap the staged probes and have
them run as the login user. Every transport that stages on a node runs this one check:
the SSH holder below, and the srun bootstrap (srun_step.py puts it in front).

HOLDER keeps a node for one run: it checks the staging directory is safe, takes the
node's lock, makes a private directory for the probes and prints `ready <dir>`; it reads
the probes from its stdin (`probes <n>` and n bytes, zlib-compressed: a JSON line of
[[file name, size], ...] and the files' bytes one after the other: one stream instead of
an SFTP request per file),
writes them into that directory (plain names only, never through a link) and prints
`staged <count>` (or `unstaged <why>`); then it holds the lock and the directory until
its stdin closes (the run ends, or the controller or its connection dies), removes the
directory and exits, which releases the lock. A node already held
by another run answers `busy <who>` (held by this run, under pytest-xdist by another
worker's connection, it goes on). An unsafe workdir answers `unsafe <why>`.
"""

from __future__ import annotations

SAFE_WORKDIR = r'''
import os, stat


def unsafe_workdir(workdir):
    uid = os.getuid()
    path = os.path.abspath(os.path.expanduser(workdir))
    parts = [p for p in path.split("/") if p]
    current = "/"
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        last = i == len(parts) - 1
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            try:
                os.mkdir(current, 0o700)
            except FileExistsError:
                pass
            st = os.lstat(current)
        if stat.S_ISLNK(st.st_mode):
            if last or st.st_uid not in (0, uid):
                return f"{current} is a symbolic link" + ("" if last else
                                                          f" owned by uid {st.st_uid}")
            st = os.stat(current)
        if not stat.S_ISDIR(st.st_mode):
            return f"{current} is not a directory"
        if last and st.st_uid != uid:
            return f"{current} is owned by uid {st.st_uid}, not by the login user (uid {uid})"
        if st.st_uid not in (0, uid):
            return f"{current} is owned by uid {st.st_uid}, neither root nor the login user"
        if st.st_mode & 0o022 and not (st.st_mode & stat.S_ISVTX and not last):
            return (f"{current} is writable by group or others "
                    f"(mode {stat.S_IMODE(st.st_mode):o})")
    return ""
'''

HOLDER = SAFE_WORKDIR + r"""
import fcntl, json, re, shutil, socket, sys, tempfile, time, zlib
workdir, name, run_id = os.path.expanduser(sys.argv[1]), sys.argv[2], sys.argv[3]

def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

why = unsafe_workdir(workdir)
if why:
    say("unsafe " + why)
    sys.exit(3)
path = os.path.abspath(workdir)

lock_path = os.path.join(path, ".lock-" + name)
fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    who = os.read(fd, 512).decode(errors="replace").strip() or "another run"
    if not who.startswith(f"run {run_id} "):  # held by this same run (another worker): go on
        say("busy " + who)
        sys.exit(4)
else:
    os.ftruncate(fd, 0)
    os.write(fd, f"run {run_id} since {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on "
                 f"{socket.gethostname()}".encode())
where = tempfile.mkdtemp(prefix="burnin-", dir=path)
say("ready " + where)
try:
    head = sys.stdin.buffer.readline().split()
    if len(head) == 2 and head[0] == b"probes" and head[1].isdigit():
        try:
            index, _, data = zlib.decompress(sys.stdin.buffer.read(int(head[1]))).partition(b"\n")
            files, at = json.loads(index), 0
            for fname, size in files:
                if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", fname):
                    raise ValueError("not a plain file name: %r" % fname)
                fd = os.open(os.path.join(where, fname),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(data[at:at + size])
                at += size
            say("staged %d" % len(files))
        except Exception as e:
            say("unstaged %s: %s" % (type(e).__name__, e))
    while sys.stdin.buffer.read(4096):
        pass
finally:
    shutil.rmtree(where, ignore_errors=True)
"""
