"""Evidence bundle per failed node: reports/<run-id>/nodes/<node>/, one folder a ticket
to a hardware vendor can attach: the verdicts, every raw probe output, the telemetry
series, and the node's facts (driver, versions, devices)."""

from __future__ import annotations

import functools
import itertools
import json
import os
import queue
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from burnin.checks import CHECKS
from burnin.model.outcome import Outcome

# put(path, text): one file of a bundle written (at once, or handed to a Files' threads).
Put = Callable[[Path, str], None]


def _write(path: Path, text: str) -> None:
    """The file at `path`, its node's folder made first where there is none yet."""
    _in_folder(path, lambda: path.write_text(text, encoding="utf-8"))


def _in_folder(path: Path, make: Callable[[], object]) -> None:
    """make() a file at `path`; where its folder is not there yet (a node's first file),
    the folder is made and make() tried once more."""
    try:
        make()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        make()


def write_bundle(run_dir: Path, node: str, verdicts: dict[str, tuple[str, str]],
                 records: list[dict], put: Put = _write) -> Path:
    folder = open_bundle(run_dir, node, verdicts, put)
    for r in records:
        add_record(folder, r, put)
    return folder


class Files:
    """A fleet's bundle files written by THREADS threads while the caller makes the next
    file's text, each file made in one `staging` folder and then renamed into its node's,
    where it appears whole. Creating a file in each of thousands of fresh folders is what
    costs (ext4 places a file's inode in its folder's block group, and new folders are
    spread over the disk: 220 to 290 us a file on the machine of benchmarks/RESULTS.md,
    against 31 us made in one folder and 12 us to rename; 17 files a failing node), and
    these threads do it outside the interpreter's lock, on another core. At most PENDING
    texts wait. A file that cannot be written costs its node's bundle only: close() says
    which, and why."""

    THREADS = 3
    PENDING = 64

    def __init__(self, staging: Path):
        _own_folder(staging)
        self._staging = staging
        self._names = itertools.count()
        self._todo: queue.Queue = queue.Queue(self.PENDING)
        self._failed: dict[str, str] = {}
        self._threads = [threading.Thread(target=self._run, name="burnin-evidence",
                                          daemon=True) for _ in range(self.THREADS)]
        for t in self._threads:
            t.start()

    def put_for(self, node: str) -> Put:
        """Where `node`'s files go."""
        return lambda path, text: self._todo.put((node, path, text))

    def _run(self) -> None:
        while (job := self._todo.get()) is not None:
            node, path, text = job
            if node in self._failed:
                continue  # its bundle is lost already: no more of it
            tmp = self._staging / f"{next(self._names)}.tmp"
            try:
                _write(tmp, text)
                _in_folder(path, functools.partial(os.replace, tmp, path))
            except Exception as e:  # a full disk, a permission: this node's bundle only
                self._failed.setdefault(node, f"{type(e).__name__}: {e}")
                tmp.unlink(missing_ok=True)

    def close(self) -> dict[str, str]:
        """Every file handed over is written (or failed): {node: why its bundle is not
        whole}. The staging folder goes."""
        for _ in self._threads:
            self._todo.put(None)
        for t in self._threads:
            t.join()
        try:
            self._staging.rmdir()
        except OSError:
            pass  # a file left in it (a rename that failed): the folder stays
        return dict(self._failed)


def _own_folder(path: Path) -> None:
    """`path` made, private, or found a folder of this user's and not a link: files are
    made in it and renamed from it, and none goes through a link someone else planted
    (`burnin report` run as root over another user's run directory)."""
    try:
        os.mkdir(path, 0o700)
        return
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError(f"{path} is not a folder of this user's (a link, or another's): "
                      "no evidence file is made through it")


def open_bundle(run_dir: Path, node: str, verdicts: dict[str, tuple[str, str]],
                put: Put = _write) -> Path:
    """The node's folder with its verdicts.txt; its records are added one at a time
    (add_record), so that a fleet's bundles are written as results.jsonl is read, no
    node's whole documents held for the others'."""
    folder = (run_dir / "nodes" / node).resolve()
    if folder.parent != (run_dir / "nodes").resolve():  # '../x', 'a/b': never a path
        raise ValueError(f"node name {node!r} is not a file name")
    lines = [f"{check}: {Outcome(outcome).junit or Outcome(outcome).word}" +
             (f": {message}" if message else "")
             for check, (outcome, message) in sorted(verdicts.items())]
    put(folder / "verdicts.txt", "\n".join(lines) + "\n")
    return folder


def add_record(folder: Path, r: dict, put: Put = _write) -> None:
    """One probe record into its node's folder: its raw document, and what its check
    draws out of it for a vendor (Check.evidence)."""
    spec = CHECKS.get(r.get("check", ""))
    if spec is None:
        return  # its name would become a file name: only checks burnin knows
    put(folder / f"{spec.name}.json", readable(r))
    if not r.get("ok") or spec.evidence is None:
        return
    try:
        extra = spec.evidence(r)
    except (KeyError, TypeError, AttributeError):
        return  # a record of an unexpected shape: its raw .json is there already
    for name, content in extra.items():
        put(folder / name, readable(content))


def readable(value, depth: int = 0) -> str:
    """JSON as a person reads it: an object's keys and a list's objects one a line, a list
    of numbers (a telemetry series, thousands of samples) on one line. json.dumps(indent=)
    would write one sample a line, in pure Python: seconds per failing node of a fleet."""
    pad = "\n" + " " * (depth + 1)
    if isinstance(value, dict) and value:
        get, deeper = _SCALAR.get, depth + 1  # most values are plain scalars: no readable()
        return "{" + ",".join(f"{pad}{_key(k)}: "
                              f"{w(v) if (w := get(type(v))) else readable(v, deeper)}"
                              for k, v in value.items()) + "\n" + " " * depth + "}"
    if isinstance(value, list) and value and isinstance(value[0], dict):  # devices, ports
        return "[" + ",".join(pad + readable(v, depth + 1) for v in value) + "\n" + \
            " " * depth + "]"
    return _dumps(value)


# json.dumps' own encoder, without its call's argument checks: 300 failing nodes of a
# fleet are a quarter of a million values.
_dumps = json.JSONEncoder().encode
# What json.dumps writes for the plain scalars, made by the same functions it uses;
# a float that is not finite (NaN, Infinity) and any subclass go through _dumps.
_SCALAR = {str: json.encoder.encode_basestring_ascii, int: int.__repr__,
           bool: lambda v: "true" if v else "false", type(None): lambda v: "null",
           float: lambda v: float.__repr__(v) if v - v == 0.0 else _dumps(v)}


def _key(k) -> str:
    try:
        return _keys(k)
    except TypeError:  # a key that cannot be hashed: not JSON's, but written all the same
        return _dumps(str(k))


@functools.lru_cache(maxsize=4096, typed=True)  # True is not 1 here
def _keys(k) -> str:
    return _dumps(str(k))
