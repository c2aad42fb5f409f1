"""Real disks for storage tests: loop-mounted ext4 and tmpfs file systems, and a cgroup v1
blkio throttle that makes a disk slow for the processes put under it. Needs root,
util-linux (losetup) and e2fsprogs; the throttle needs the cgroup v1 blkio controller."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

BLKIO = Path("/sys/fs/cgroup/blkio")


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True,
                          timeout=120).stdout.strip()


def missing_requirements() -> str:
    if os.geteuid() != 0:
        return "test disks need root"
    missing = [t for t in ("losetup", "mkfs.ext4", "mount", "umount") if not shutil.which(t)]
    return f"missing tools: {', '.join(missing)}" if missing else ""


class LoopDisk:
    """An ext4 file system in a file, on a loop device, mounted at `mountpoint`."""

    def __init__(self, workdir: Path, name: str, size_mb: int):
        self.image = workdir / f"{name}.img"
        self.mountpoint = workdir / name
        self.size_mb = size_mb
        self.device = ""

    def __enter__(self) -> LoopDisk:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(self.size_mb << 20)
        self.device = run("losetup", "--find", "--show", str(self.image))
        run("mkfs.ext4", "-q", "-F", self.device)
        run("mount", self.device, str(self.mountpoint))
        return self

    @property
    def major_minor(self) -> str:
        st = os.stat(self.device)
        return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"

    def __exit__(self, *exc) -> None:
        subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True)
        if self.device:
            subprocess.run(["losetup", "-d", self.device], capture_output=True)
        self.image.unlink(missing_ok=True)


class Tmpfs:
    """A small tmpfs: a file system that fills up for real."""

    def __init__(self, mountpoint: Path, size_mb: int):
        self.mountpoint, self.size_mb = mountpoint, size_mb

    def __enter__(self) -> Tmpfs:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        run("mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "burnin-test",
            str(self.mountpoint))
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True)


class Throttle:
    """A blkio cgroup limiting reads and writes on one device to `bytes_per_s`."""

    def __init__(self, device: str, bytes_per_s: int):
        self.path = BLKIO / f"burnin-test-{secrets.token_hex(4)}"
        self.device, self.rate = device, bytes_per_s

    def __enter__(self) -> Throttle:
        if not (BLKIO / "blkio.throttle.read_bps_device").exists():
            raise RuntimeError("no cgroup v1 blkio throttle on this machine")
        self.path.mkdir()
        for kind in ("read", "write"):
            (self.path / f"blkio.throttle.{kind}_bps_device").write_text(
                f"{self.device} {self.rate}\n")
        return self

    def add(self, pid: int) -> None:
        """Put a process under the throttle; the children it starts later inherit it."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def __exit__(self, *exc) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                return
            except OSError:  # processes still inside: move them out
                for pid in (self.path / "cgroup.procs").read_text().split():
                    try:
                        (BLKIO / "cgroup.procs").write_text(f"{pid}\n")
                    except OSError:
                        pass
                time.sleep(0.1)
