#!/usr/bin/env python3
"""burnin storage probe: can every GPU be fed? Throughput measured the way fio measures it,
and every block verified.

Runs ON a node. One stream per GPU (settings.streams on a CPU-only node), each with its
own file under the storage path, all at once: a write phase, then a read phase. fio's
terms for it: per file, `iodepth` threads of synchronous requests (psync, numjobs=iodepth,
interleaved block by block), block_mb requests, O_DIRECT, files preallocated
(fallocate=native); buffers on huge pages (io_buffers says why). Where the file system
refuses O_DIRECT: buffered, fsynced and dropped from the page cache before reading, and
said so. Throughput as fio defines it: bytes over one clock, from the moment every
stream's threads are released to the last completion; per stream, to its own last.

Every block carries its run token, stream, offset, pattern and the CRC-32 of its payload;
every block read is checked (inline, in the timed window, unless verify is 'after').
Files are removed at the end, also on failure or when killed.

    echo '{"storage": {"path": "/mnt/data"}, "settings": {"size_gb": 1}}' \
        | python3 probes/storage.py

Settings: size_gb (per stream), duration_s (time-based instead), block_mb (4), iodepth
(4), streams (CPU nodes, 4), verify (inline | after). FOR TESTS AND BENCHMARKS ONLY, in the
payload's test_hooks (probelib.test_hooks: never sent by the controller): handshake_dir, the
probe writes 'written' there after the write phase and waits for 'go'
before reading; after the read phase it writes 'read' and, if 'hold' is there, waits for
'end' before its untimed checks and clean-up (another tool may read the files meanwhile).
"""

from __future__ import annotations

import errno
import os
import secrets
import signal
import statistics
import struct
import sys
import threading
import time
import zlib

import probelib
from directio import io_buffers, preallocate

PROBE = "storage"
HEADER = struct.Struct("<8s16sIIQII")  # magic, token, stream, pattern, offset, length, crc
HEADER_SIZE = 64
MAGIC = b"BURNINBK"
MAX_EXAMPLES = 8


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


class Stream:
    """One stream: its file, its patterns (one random buffer per request in flight)."""

    def __init__(self, index: int, path: str, block: int, iodepth: int, token: bytes):
        self.index, self.path, self.block, self.iodepth, self.token = \
            index, path, block, iodepth, token
        self.patterns = [os.urandom(block - HEADER_SIZE) for _ in range(iodepth)]
        self.crcs = [zlib.crc32(p) for p in self.patterns]
        self.buffers, self.huge_pages = io_buffers(iodepth, block)
        self.preallocated = False
        self.written = 0
        self.results: dict[str, dict] = {}
        self.bad: list[dict] = []
        self.bad_count = 0
        self.lock = threading.Lock()

    def header(self, pattern: int, offset: int) -> bytes:
        head = HEADER.pack(MAGIC, self.token, self.index, pattern, offset, self.block,
                           self.crcs[pattern])
        return head + struct.pack("<I", zlib.crc32(head)) + bytes(
            HEADER_SIZE - HEADER.size - 4)

    def check(self, buf: memoryview, offset: int) -> str:
        """'' when the block read at `offset` is the one written there, else what is wrong."""
        head = bytes(buf[:HEADER.size])
        (stored,) = struct.unpack_from("<I", buf, HEADER.size)
        if zlib.crc32(head) != stored:
            return "header checksum mismatch"
        magic, token, stream, pattern, at, length, crc = HEADER.unpack(head)
        if magic != MAGIC or token != self.token:
            return "not a block of this run"
        if stream != self.index or at != offset or length != self.block:
            return f"misplaced: block of stream {stream} offset {at}"
        if pattern >= len(self.crcs) or crc != self.crcs[pattern]:
            return "header names an unknown payload"
        if zlib.crc32(buf[HEADER_SIZE:]) != crc:
            return "payload checksum mismatch"
        return ""

    def record_bad(self, offset: int, what: str) -> None:
        with self.lock:
            self.bad_count += 1
            if len(self.bad) < MAX_EXAMPLES:
                self.bad.append({"stream": self.index, "file": self.path, "offset": offset,
                                 "problem": what})


def open_file(path: str, flags: int, direct: bool) -> tuple[int, bool, str]:
    """Open with O_DIRECT when asked and allowed; (fd, direct?, why not)."""
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o600), True, ""
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            why = "the file system refuses O_DIRECT"
    else:
        why = "O_DIRECT not asked for" if not direct else "O_DIRECT unavailable"
    return os.open(path, flags, 0o600), False, why


def run_phase(streams, phase: str, direct: bool, size: int | None, deadline: float | None,
              verify_inline: bool, stop: threading.Event) -> tuple[bool, str, list[str]]:
    """Every stream at once, each with iodepth threads issuing synchronous requests at
    consecutive offsets (fio's psync engine with numjobs=iodepth per file). Files are
    opened, preallocated and buffers filled first; then every thread is released at once
    and one clock runs from that moment: a stream's time ends at its last completion, the
    phase's at the last completion of any stream (fio's group runtime)."""
    run = PhaseRun(phase, direct, size, deadline, verify_inline, stop)
    opened = run.open_streams(streams)
    if stop.is_set() or not opened:
        for _, fd, _ in opened:
            os.close(fd)
        return run.direct, run.why, run.errors
    run.go = threading.Barrier(sum(s.iodepth for s, _, _ in opened),
                               action=lambda: run.clock.update(start=time.perf_counter()))
    threads = [threading.Thread(target=run.stream_phase, args=o) for o in opened]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return run.direct, run.why, run.errors


class PhaseRun:
    """One phase (write or read) over every stream: what its threads share."""

    def __init__(self, phase: str, direct: bool, size: int | None, deadline: float | None,
                 verify_inline: bool, stop: threading.Event):
        self.phase, self.write = phase, phase == "write"
        self.direct, self.why = direct, ""
        self.size, self.deadline, self.verify_inline, self.stop = \
            size, deadline, verify_inline, stop
        self.errors: list[str] = []
        self.clock: dict[str, float] = {}
        self.go: threading.Barrier | None = None

    def open_streams(self, streams) -> list[tuple[Stream, int, bool]]:
        opened = []
        for s in streams:
            # Our own new file, never one planted there before us, never through a link.
            flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL) if self.write else os.O_RDONLY
            flags |= os.O_NOFOLLOW
            try:
                fd, is_direct, why = open_file(s.path, flags, self.direct)
            except OSError as e:
                self.errors.append(f"stream {s.index}: cannot open {s.path}: {e.strerror}")
                self.stop.set()
                break
            if not is_direct:
                self.direct, self.why = False, why
            if self.write and self.size:
                s.preallocated = preallocate(fd, self.size)
            opened.append((s, fd, is_direct))
        return opened

    def fail(self, s: Stream, offset: int, why: str) -> None:
        self.errors.append(f"stream {s.index}: {self.phase} failed at offset {offset} "
                           f"({offset / 1e9:.2f} GB into {s.path}): {why}")
        self.stop.set()

    def request_loop(self, s: Stream, fd: int, slot: int, cursor: dict,
                     lock: threading.Lock) -> None:
        write, stop = self.write, self.stop
        limit = self.size if write else s.written
        view = s.buffers[slot]
        if write:
            view[HEADER_SIZE:] = s.patterns[slot]
        try:
            assert self.go is not None
            self.go.wait()
        except threading.BrokenBarrierError:
            return
        while not stop.is_set():
            with lock:
                offset = cursor["next"]
                if (limit is not None and offset + s.block > limit) or (
                        self.deadline is not None and write
                        and time.perf_counter() > self.deadline):
                    return
                cursor["next"] += s.block
            try:
                if write:
                    view[:HEADER_SIZE] = s.header(slot, offset)
                    n = os.pwritev(fd, [view], offset)
                else:
                    n = os.preadv(fd, [view], offset)
            except OSError as e:
                self.fail(s, offset, "disk full" if e.errno == errno.ENOSPC else e.strerror)
                return
            if n != s.block:
                why = f"short {self.phase}, {n} of {s.block} bytes"
                if write and free_bytes(s.path) < s.block:
                    why = f"disk full ({why})"  # a filling disk first writes short
                self.fail(s, offset, why)
                return
            if not write and self.verify_inline:
                problem = s.check(view, offset)
                if problem:
                    s.record_bad(offset, problem)
            with lock:
                cursor["done"] += s.block
                cursor["end"] = time.perf_counter()

    def stream_phase(self, s: Stream, fd: int, is_direct: bool) -> None:
        cursor = {"next": 0, "done": 0, "end": None}
        lock = threading.Lock()
        threads = [threading.Thread(target=self.request_loop, args=(s, fd, k, cursor, lock))
                   for k in range(s.iodepth)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.write and not is_direct and not self.stop.is_set():
            os.fsync(fd)  # buffered: the data is on the device before the clock stops
            cursor["end"] = time.perf_counter()
        if not is_direct:  # buffered: do not let the read phase hit the page cache
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        if self.write:
            s.written = cursor["done"]
        clock = self.clock
        seconds = (cursor["end"] - clock["start"]) if cursor["end"] and clock else 0.0
        s.results[self.phase] = {
            "bytes": cursor["done"], "seconds": round(seconds, 4),
            "gbps": round(cursor["done"] / seconds / 1e9, 4) if seconds else 0}


def free_bytes(path: str) -> int:
    try:
        st = os.statvfs(os.path.dirname(path))
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def verify_after(streams, direct: bool) -> None:
    """Untimed verification pass, for verify: after."""
    for s in streams:
        fd, _, _ = open_file(s.path, os.O_RDONLY | os.O_NOFOLLOW, direct)
        view = s.buffers[0]
        for offset in range(0, s.written, s.block):
            os.preadv(fd, [view], offset)
            problem = s.check(view, offset)
            if problem:
                s.record_bad(offset, problem)
        os.close(fd)


def signal_and_wait(folder: str, mark: str, wait_for: str, only_if: str = "") -> None:
    """The tests' handshake: leave `mark` in `folder`, then wait for `wait_for` (when
    `only_if` is given, only if that file is there)."""
    open(os.path.join(folder, mark), "w").close()
    if only_if and not os.path.exists(os.path.join(folder, only_if)):
        return
    while not os.path.exists(os.path.join(folder, wait_for)):
        time.sleep(0.02)


def gpu_count(payload: dict) -> int:
    """GPUs to feed, one stream each: the controller's count, else what NVML reports.
    Torch is not needed to measure a disk."""
    if isinstance(payload.get("gpus"), int):
        return payload["gpus"]
    return probelib.nvml_count() or 0


def filesystem(path: str) -> dict:
    """The mount point, type and device the path is on (/proc/self/mountinfo)."""
    real = os.path.realpath(path)
    best: dict = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rest = left.split(), right.split()
                point = fields[4].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best.get("mount", "")):
                    best = {"mount": point, "type": rest[0], "device": rest[1]}
    except (OSError, IndexError):
        pass
    return best


def prepare(root: str, mount: str | None) -> tuple[str, bool]:
    """('' or why the check cannot run there, created?). The path's last component is
    created when missing (its parent must exist); a configured mount must hold it."""
    created = False
    if not os.path.isdir(root):
        parent = os.path.dirname(root.rstrip("/")) or "/"
        if os.path.lexists(root) or not os.path.isdir(parent):
            return (f"storage path {root} does not exist and its parent {parent} is not a "
                    "directory"), False
        try:
            os.mkdir(root, 0o700)
            created = True
        except OSError as e:
            return f"cannot create storage path {root}: {e.strerror}", False
    if mount:
        fs = filesystem(root)
        if fs.get("mount") != os.path.realpath(mount):
            return (f"storage path {root} is on {fs.get('mount', '?')} ({fs.get('type', '?')} "
                    f"on {fs.get('device', '?')}), not on the mount {mount} the inventory "
                    "names: is the data disk mounted?"), created
    return "", created


def summarise(streams, phase: str) -> dict:
    """fio's figures: bytes over the longest stream's time; then per GPU (per stream on
    a CPU node): the slowest stream, the median stream, and the aggregate shared out."""
    done = [s.results[phase] for s in streams if phase in s.results]
    if not done:
        return {}
    total = sum(r["bytes"] for r in done)
    longest = max(r["seconds"] for r in done)
    per = [r["gbps"] for r in done]
    return {"bytes": total, "seconds": longest,
            "gbps": round(total / longest / 1e9, 4) if longest else 0.0,
            "per_gpu_min": min(per), "per_gpu_median": round(statistics.median(per), 4),
            "per_gpu_aggregate": round(total / longest / 1e9 / len(streams), 4)
            if longest else 0.0}


def write_then_read(streams: list[Stream], size: int | None, deadline: float | None,
                    verify_inline: bool, figures: dict, handshake: str | None,
                    stop: threading.Event) -> list[str]:
    """The write phase, then the read phase over what was written; the phases' figures go
    into `figures`; returns the errors."""
    errors: list[str] = []
    direct, why, errs = run_phase(streams, "write", True, size, deadline, False, stop)
    errors += errs
    figures["direct"] = direct
    figures["preallocated"] = all(s.preallocated for s in streams)
    figures["huge_page_buffers"] = all(s.huge_pages for s in streams)
    if not direct:
        figures["direct_reason"] = why + "; buffered I/O, fsync, cache dropped"
    if handshake and not errors:
        signal_and_wait(handshake, "written", "go")
    if not errors:
        _, _, errs = run_phase(streams, "read", direct, None, None, verify_inline, stop)
        errors += errs
        if handshake and not errors:
            signal_and_wait(handshake, "read", "end", only_if="hold")
        if not verify_inline and not errors:
            verify_after(streams, direct)
    return errors


def remove_stream_files(streams: list[Stream], created_root: str | None) -> None:
    """Every stream's file, and the storage directory if this probe created it."""
    for s in streams:
        try:
            os.unlink(s.path)
        except OSError:
            pass
    if created_root:
        try:
            os.rmdir(created_root)
        except OSError:
            pass


def main() -> int:
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    settings = payload.get("settings", {})
    storage = payload.get("storage") or {}
    root = storage.get("path") or settings.get("path") or "/tmp"
    gpus = gpu_count(payload)
    cpu_devices = int(payload.get("cpu_devices") or 1)
    count = gpus if gpus > 0 else (cpu_devices if cpu_devices > 1
                                    else int(settings.get("streams", 4)))
    block = int(settings.get("block_mb", 4)) << 20
    iodepth = int(settings.get("iodepth", 4))
    duration = settings.get("duration_s")
    size = None if duration else int(float(settings.get("size_gb", 1)) * 1e9) // block * block
    verify_inline = settings.get("verify", "inline") != "after"
    token = secrets.token_bytes(16)
    figures = {"path": root, "gpus": gpus, "streams": count, "block_bytes": block,
               "iodepth": iodepth, "verify": "inline, every block" if verify_inline
               else "after the timed window, every block"}
    errors: list[str] = []
    streams = [Stream(i, os.path.join(root, f"burnin-{token.hex()[:12]}-{i}.dat"), block,
                      iodepth, token) for i in range(count)]
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))  # so that `finally` cleans up
    stop = threading.Event()
    problem, created = prepare(root, storage.get("mount"))
    try:
        if problem:
            errors.append(problem)
        else:
            figures["filesystem"] = filesystem(root)
            deadline = time.perf_counter() + duration if duration else None
            errors += write_then_read(streams, size, deadline, verify_inline, figures,
                                      probelib.test_hooks(payload).get("handshake_dir"), stop)
    finally:
        remove_stream_files(streams, root if created else None)
    figures["write"] = summarise(streams, "write")
    figures["read"] = summarise(streams, "read")
    figures["integrity_errors"] = sum(s.bad_count for s in streams)
    devices = [{"stream": s.index, "gpu": s.index if gpus else None, "file": s.path,
                "write": s.results.get("write"), "read": s.results.get("read"),
                "integrity_errors": s.bad_count, "bad_blocks": s.bad} for s in streams]
    probelib.emit(PROBE, {"hostname": os.uname()[1]}, devices, figures, errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
