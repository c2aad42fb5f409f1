"""The storage probe against fio, like for like, on one file system.

fio runs the probe's access pattern exactly: per stream one file, `iodepth` threads of
synchronous requests (ioengine=psync, numjobs=iodepth, offset_increment=one block and
rw=read:<iodepth-1 blocks>, so that the threads interleave block by block as the
probe's do), requests of one block, O_DIRECT, files preallocated (fallocate=native, as
the probe does) and I/O buffers on 2 MiB huge pages (iomem=shmhuge; the probe asks for
transparent huge pages). fio writes its own new files, then reads the very files the
probe just wrote, while the probe waits (its test hook handshake_dir); which tool goes first
alternates from run to run. Both figures are fio's definition: all bytes over one clock,
from the start to the last completion of any stream. The block device's counters give
each run's average request size: where the figures differ, that is the first place to
look (see benchmarks/RESULTS.md). Needs fio; root for the huge pages (without them fio
runs on 4 KiB pages and the comparison says it is not like for like).

    python benchmarks/storage_vs_fio.py --dir /var/tmp [--size-gb 1] [--streams 4]
                                        [--iodepth 4] [--block-mb 4] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HUGE = 2 << 20
NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")


def device_counters(directory: Path):
    """A reader of the counters of the block device holding `directory`, or None."""
    dev = os.stat(directory).st_dev
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    if not stat.exists():
        return None
    return lambda: [int(x) for x in stat.read_text().split()]


def request_kib(before, after, phase: str) -> float | None:
    """Average request size the device saw in `phase` between two readings."""
    if before is None:
        return None
    ios, sectors = (0, 2) if phase == "read" else (4, 6)
    n = after[ios] - before[ios]
    return (after[sectors] - before[sectors]) * 512 / n / 1024 if n else None


def job_file(rw: str, files: list[Path], file_bytes: int, args, huge: bool) -> str:
    """One section per file, iodepth interleaved psync threads each: the probe's pattern."""
    block = args.block_mb << 20
    lines = ["[global]", f"rw={rw}:{(args.iodepth - 1) * block}", f"bs={block}",
             # Thread k reads blocks k, k+iodepth, ...: its region ends at the file's end.
             f"size={file_bytes - (args.iodepth - 1) * block}",
             f"io_size={file_bytes // args.iodepth}", f"numjobs={args.iodepth}",
             f"offset_increment={block}", "ioengine=psync", "direct=1", "thread",
             # One layout per file, as the probe's: without filesize, each thread lays the
             # file out to its own region's end, and fio unlinks and lays out again.
             "fallocate=native", f"filesize={file_bytes}", "group_reporting"]
    if huge:
        lines += ["iomem=shmhuge", "hugepage-size=2m"]
    for i, f in enumerate(files):
        lines += [f"[stream{i}]", f"filename={f}"]
    return "\n".join(lines) + "\n"


def settle(counters, quiet_s: float = 1.0, limit_s: float = 20.0) -> None:
    """Wait until the device has had nothing to do for `quiet_s`: deleted files are
    discarded (ext4 -o discard) asynchronously after the journal commits, and 4 GB of
    discards under the next timed phase slows it down by half. `quiet_s` 0: sync only."""
    os.sync()
    if counters is None or quiet_s <= 0:
        return
    deadline = time.monotonic() + limit_s
    last = counters()
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = counters()
        if now == last:
            return
        last = now


def fio(rw: str, files: list[Path], file_bytes: int, args, huge: bool, counters):
    """(GB/s, average request KiB) of one fio run."""
    before = counters() if counters else None
    out = fio_job(job_file(rw, files, file_bytes, args, huge))
    after = counters() if counters else None
    group = json.loads(out)["jobs"][0][rw]
    assert group["io_bytes"] == file_bytes * len(files), "fio must move the probe's bytes"
    return group["bw_bytes"] / 1e9, request_kib(before, after, rw)


def fio_job(text: str) -> str:
    proc = subprocess.Popen(["fio", "--output-format=json", "-"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(text, timeout=3600)
    finally:
        remove_shared_memory(proc.pid)
    if proc.returncode != 0:
        raise SystemExit(f"fio failed ({proc.returncode}): {err[-2000:]}")
    return out


def remove_shared_memory(pid: int) -> None:
    """A fio that dies (it does, when huge pages run short) leaves its SysV segments, and
    their huge pages, behind: remove those that process created."""
    if not shutil.which("ipcs"):
        return
    table = subprocess.run(["ipcs", "-m", "-p"], capture_output=True, text=True).stdout
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0].isdigit() and fields[2] == str(pid):
            subprocess.run(["ipcrm", "-m", fields[0]], capture_output=True)


class ProbeRun:
    """The probe, paused between its phases through its handshake folder."""

    def __init__(self, directory: Path, handshake: Path, file_bytes: int, args):
        handshake.mkdir()
        (handshake / "hold").touch()
        self.handshake = handshake
        payload = {"gpus": 0, "storage": {"path": str(directory)},
                   "settings": {"size_gb": (file_bytes + (args.block_mb << 19)) / 1e9,
                                "streams": args.streams, "iodepth": args.iodepth,
                                "block_mb": args.block_mb, "verify": args.verify},
                   "test_hooks": {"handshake_dir": str(handshake)}}
        self.stderr = open(handshake / "stderr", "w+")
        self.proc = subprocess.Popen([sys.executable, str(REPO / "probes" / "storage.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.close()

    def reached(self, mark: str) -> None:
        while not (self.handshake / mark).exists():
            if self.proc.poll() is not None:
                self.stderr.seek(0)
                raise SystemExit(f"the probe ended before '{mark}': {self.stderr.read()[-2000:]}"
                                 f"{self.proc.stdout.read()[-2000:]}")
            time.sleep(0.005)

    def release(self, mark: str) -> None:
        (self.handshake / mark).touch()

    def result(self) -> dict:
        out = self.proc.stdout.read()
        self.proc.wait(timeout=600)
        doc = json.loads(out)
        fig = doc["figures"]
        assert not doc["errors"] and fig["integrity_errors"] == 0, doc["errors"]
        assert fig["direct"], "the probe fell back to buffered I/O: not like for like"
        return fig


def one_run(base: Path, args, fio_first: bool, huge: bool, counters) -> dict[str, tuple]:
    block = args.block_mb << 20
    blocks = max(args.iodepth, int(args.size_gb * 1e9) // block // args.iodepth * args.iodepth)
    file_bytes = blocks * block
    work = Path(tempfile.mkdtemp(prefix="burnin-bench-", dir=base))
    try:
        # One directory for both: the file system places both tools' files alike.
        (work / "data").mkdir()
        fio_files = [work / "data" / f"fio-stream{i}.dat" for i in range(args.streams)]
        out = {}
        # the last run's files are discarded after their deletion
        settle(counters, args.settle_s)
        if fio_first:
            out["fio write"] = fio("write", fio_files, file_bytes, args, huge, counters)
            settle(counters, args.settle_s)
        before = counters() if counters else None
        probe = ProbeRun(work / "data", work / "handshake", file_bytes, args)
        probe.reached("written")
        probe_w = request_kib(before, counters() if counters else None, "write")
        if not fio_first:
            settle(counters, args.settle_s)
            out["fio write"] = fio("write", fio_files, file_bytes, args, huge, counters)
        for f in fio_files:
            f.unlink()
        settle(counters, args.settle_s)
        files = sorted((work / "data").glob("burnin-*.dat"))
        assert len(files) == args.streams and all(f.stat().st_size == file_bytes
                                                  for f in files), "the probe's files"
        if fio_first:
            out["fio read"] = fio("read", files, file_bytes, args, huge, counters)
            settle(counters, args.settle_s)
        before = counters() if counters else None
        probe.release("go")
        probe.reached("read")
        probe_r = request_kib(before, counters() if counters else None, "read")
        if not fio_first:
            settle(counters, args.settle_s)
            out["fio read"] = fio("read", files, file_bytes, args, huge, counters)
        assert all(f.stat().st_size == file_bytes for f in files), "fio must not lay them out"
        probe.release("end")
        fig = probe.result()  # its blocks verified after fio read them: nothing changed
        assert fig["write"]["bytes"] == fig["read"]["bytes"] == file_bytes * args.streams
        out["probe write"] = (fig["write"]["gbps"], probe_w)
        out["probe read"] = (fig["read"]["gbps"], probe_r)
        out["huge_page_buffers"] = fig.get("huge_page_buffers")
        out["preallocated"] = fig.get("preallocated")
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def huge_pages(pages: int):
    """Reserve `pages` more 2 MiB pages for fio's buffers for the duration; yields whether
    they are there (root only; the kernel may find fewer)."""
    try:
        old = int(NR_HUGEPAGES.read_text())
        NR_HUGEPAGES.write_text(str(old + pages))
    except (OSError, ValueError):
        yield False
        return
    try:
        yield int(NR_HUGEPAGES.read_text()) >= old + pages
    finally:
        NR_HUGEPAGES.write_text(str(old))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True, help="a directory on the file system to measure")
    p.add_argument("--size-gb", type=float, default=1.0, help="per stream")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--iodepth", type=int, default=4)
    p.add_argument("--block-mb", type=int, default=4)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--settle-s", type=float, default=1.0,
                   help="before each timed phase, wait until the device has been idle this "
                        "long (at most 20 s); 0: sync only (a smoke run: figures unsettled)")
    p.add_argument("--verify", default="after", choices=("after", "inline"),
                   help="the probe's verify mode (fio runs without verify: after is like it)")
    args = p.parse_args()
    if not shutil.which("fio"):
        raise SystemExit("fio is not installed (apt-get install fio)")
    base = Path(args.dir)
    counters = device_counters(base)
    # Per fio thread: a block, a page of alignment, rounded up to huge pages, and one more.
    per_job = -(-((args.block_mb << 20) + 4096) // HUGE) + 1
    rows: dict[str, list[tuple]] = {}
    with huge_pages(per_job * args.streams * args.iodepth + 4) as huge:
        if not huge:
            print("fio's buffers are on 4 KiB pages (no huge pages: not root?): NOT like "
                  "for like; expect fio's requests to be split smaller", flush=True)
        for k in range(args.repeat):
            got = one_run(base, args, k % 2 == 0, huge, counters)
            for key in ("fio write", "probe write", "fio read", "probe read"):
                rows.setdefault(key, []).append(got[key])
            print(f"run {k + 1} ({'fio' if k % 2 == 0 else 'probe'} first): " + ", ".join(
                f"{key} {got[key][0]:.3f}" for key in rows) + " GB/s; probe: huge pages "
                f"{got['huge_page_buffers']}, preallocated {got['preallocated']}", flush=True)
    med = {key: statistics.median(r[0] for r in runs) for key, runs in rows.items()}
    for key, runs in rows.items():
        sizes = [r[1] for r in runs if r[1] is not None]
        size = f", requests {statistics.median(sizes):.0f} KiB on average" if sizes else ""
        print(f"{key:11s} median {med[key]:.3f} GB/s (runs "
              f"{', '.join(f'{r[0]:.3f}' for r in runs)}){size}")
    # Each run puts the tools back to back: the device's own swings (write latency on this
    # VM moves 4x within minutes) cancel in a run's ratio more than across medians.
    ratio = {phase: statistics.median(p[0] / f[0] for p, f in zip(
        rows[f"probe {phase}"], rows[f"fio {phase}"], strict=True)) for phase in ("write", "read")}
    print(f"{args.streams} streams x {args.size_gb:g} GB, {args.block_mb} MiB, "
          f"{args.iodepth} in flight per stream, median of {args.repeat} runs' ratios: "
          f"write probe/fio = {ratio['write']:.3f}, read probe/fio = {ratio['read']:.3f}")

if __name__ == "__main__":
    main()
