"""The 11-host SSH fault run, for a person to read its summary.html as an operator
would: 11 real SSH test hosts, three with faults planted below the probes, the suite's
health, sdc, burn and storage checks over SSH, then headless Chromium screenshots of the
page's top and of each failing node's section.

    python tests/fault_page.py [--out /tmp/fault-page]      # root; sshd, chromium

Planted faults (as the tests plant them, each below the probe):
    h3   a slow "GPU": its torch computes every product four times over (sitecustomize),
         so its burn runs at a quarter of its peers' rate (the burn's straggler rule)
    h6   silent data corruption: its torch computes one element of every large product
         wrong (sitecustomize loaded before the probe), so sdc's known answer differs
    h9   a throttled disk: its storage lives on a loop device throttled to 10 MB/s by a
         cgroup holding that host's sshd, so its storage streams fall below the floor
The other eight hosts are healthy. Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

from support import testdisks  # noqa: E402
from support.summarypage import screenshot  # noqa: E402
from support.testhosts import TestHosts  # noqa: E402

FAULTY_TORCH = """\
import torch
_mm = torch.mm
def mm(*args, **kwargs):
    out = _mm(*args, **kwargs)
    if out.dtype == torch.float32 and out.dim() == 2 and out.shape[0] >= 32:
        out[17, 5] += 2.0
    return out
torch.mm = mm
"""
# A slow device: every product computed four times over (below the probe, as a GPU held
# at a quarter of its clocks would be).
SLOW_TORCH = """\
import torch
_mm = torch.mm
def mm(*args, **kwargs):
    for _ in range(3):
        _mm(*args, **kwargs)
    return _mm(*args, **kwargs)
torch.mm = mm
"""
SLOW, SDC, DISK = "h3", "h6", "h9"
CHECKS = {"sdc": {"n": 256, "duration_s": 2, "random_repeats": 2},
          # 11 hosts share 2 cores here: only a node far below its peers is a straggler.
          "burn": {"duration_s": 6, "n": 256, "sample_s": 0.5, "peer_fraction": 0.5},
          "storage": {"size_gb": 0.04, "streams": 2, "min_read_gbps_per_gpu": 0.05,
                      "min_write_gbps_per_gpu": 0.05}}


def wrapper(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}")
    path.chmod(0o755)
    return str(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="/tmp/fault-page")
    args = p.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="fault-page-"))
    one = f"OMP_NUM_THREADS=1 exec {sys.executable} \"$@\"\n"
    faulty = work / "faulty"
    faulty.mkdir()
    (faulty / "sitecustomize.py").write_text(FAULTY_TORCH)
    slowed = work / "slowed"
    slowed.mkdir()
    (slowed / "sitecustomize.py").write_text(SLOW_TORCH)
    special = {SDC: wrapper(work / "python-sdc", f"PYTHONPATH={faulty} {one}"),
               SLOW: wrapper(work / "python-slow", f"PYTHONPATH={slowed} {one}")}
    healthy = wrapper(work / "python", one)
    with testdisks.LoopDisk(work, "fast", 1536) as fast, \
            testdisks.LoopDisk(work, "slow", 256) as slow, \
            testdisks.Throttle(slow.major_minor, 10 * 1000 * 1000) as disk_throttle, \
            TestHosts(11, work / "hosts") as hosts:
        disk_throttle.add(hosts[8].sshd.pid)  # h9's sessions, and so its probes
        nodes = {h.name: {"python": special.get(h.name, healthy),
                          "storage": {"path": str(slow.mountpoint if h.name == DISK
                                                  else fast.mountpoint)}}
                 for h in hosts.hosts}
        inv = hosts.write_inventory(work / "inv.yaml", nodes=nodes, checks=CHECKS, gpus=0)
        started = time.monotonic()
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pytest", str(REPO / "suites"), "--inventory",
                 str(inv), "--reports", str(out / "reports"), "-p", "no:cacheprovider",
                 "-q", "-k", "health or sdc or burn or storage", "--profile", "quick"],
                capture_output=True, text=True, timeout=1800)
        finally:
            hosts.teardown()  # before the disk throttle goes: its cgroup must be empty
    print(run.stdout[-3000:])
    print(f"suite: exit {run.returncode} in {time.monotonic() - started:.0f} s")
    page = (out / "reports" / "latest" / "summary.html").resolve()
    profile = work / "chromium"
    shots = {"top": screenshot(page, out / "top.png", profile, "1400,1500")}
    for node in (SLOW, SDC, DISK):
        shots[node] = screenshot(page, out / f"{node}.png", profile, "1400,2400", only=node)
    for name in shots:
        print(f"screenshot: {out / (name + '.png')}")
    print(f"page: {page}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
