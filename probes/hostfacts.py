"""The host beside its GPUs, for the health probe: XIDs and NVSwitch SXids in the kernel
log since boot, memory (EDAC) error counts, swap. Standard library only; imports nothing
of burnin.

Every reader is bounded (a node's kernel log can hold a million lines) and says where it
read from and why it could not: the controller decides what an unreadable source means.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from pathlib import Path

# NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., GPU has fallen off the bus.
# With MIG on, the driver names the GPU instance as well: "Xid (PCI:0000:01:00 GPU-I:05): 94"
# (open-gpu-kernel-modules, kern_gpu_error_cont_ga100.c).
XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2})"
                 r"(?:\.[0-7])?(?: GPU-I:[0-9A-Fa-f]{1,4})?\): (\d{1,6})\b,? ?(.*)")
# The NVSwitch driver's own: nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ...
SXID = re.compile(r"nvidia-(nvswitch\d{1,4}): SXid \(PCI:([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:"
                  r"[0-9A-Fa-f]{1,2}(?:\.[0-7])?)\): (\d{1,6})\b,? ?(.*)")
MAX_XIDS = 1000           # events kept, of each kind; the rest are counted
MAX_RECORDS = 2_000_000   # kernel log records read at most
READ_S = 10.0             # and for at most this long
TEXT = 300                # characters of each XID line kept


def kernel_xids(where: str | bool | None, proc_root: str = "/proc") -> dict:
    """NVRM Xid and NVSwitch SXid lines in the kernel log since boot. `where`: "auto"
    (/dev/kmsg, else `journalctl -k -b`), "off" (not read: the operator opted out), or a
    file of kernel log lines (kmsg records or dmesg text). Returns {source, readable,
    error, user, xids, sxids, dropped, records, oldest_s, newest_s, first_seq, overruns,
    complete, uptime_s}: each xid is {pci, xid, text, t (s since boot, or None)}, each
    sxid {switch, pci, sxid, text, t}; oldest_s/newest_s the span the records read cover,
    first_seq the kmsg sequence number of the oldest (0 is the boot's first message: more
    means the ring buffer had already overwritten the start), overruns the records lost
    to the ring while reading, complete False where a bound stopped the read early."""
    # YAML reads an unquoted `kernel_log: off` as false: that is the operator's "off".
    where = "off" if where is False else (where or "auto")
    out = {"source": where, "readable": False, "error": None, "user": _user(), "xids": [],
           "sxids": [], "dropped": 0, "records": 0, "oldest_s": None, "newest_s": None,
           "first_seq": None, "overruns": 0, "complete": True, "uptime_s": _uptime(proc_root)}
    if where == "off":
        out["error"] = "not read: kernel_log is off"
        return out
    if where != "auto":
        try:
            with open(where, encoding="utf-8", errors="replace") as f:
                _scan(out, _bounded(out, f))
            out["readable"] = True
        except OSError as e:
            out["error"] = f"{where}: {e.strerror or e}"
        return out
    try:
        _scan(out, _kmsg(out))
        out.update(source="/dev/kmsg", readable=True)
        return out
    except OSError as e:
        first = f"/dev/kmsg: {e.strerror or e}"
        if e.errno in (errno.EPERM, errno.EACCES):
            first += _restricted()
    try:
        done = subprocess.run(["journalctl", "-k", "-b", "--no-pager", "-o", "short-monotonic"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=READ_S * 3)
    except (OSError, subprocess.TimeoutExpired) as e:
        out["error"] = f"{first}; journalctl -k: {e}"
        return out
    if done.returncode != 0:
        out["error"] = f"{first}; journalctl -k exited {done.returncode}: " \
                       f"{done.stderr.strip()[-300:]}"
        return out
    lines = done.stdout.splitlines()
    if len(lines) < 2:  # a boot always logs: journald is not collecting the kernel's log
        out["error"] = f"{first}; journalctl -k -b returned no kernel messages"
        return out
    _scan(out, lines[-MAX_RECORDS:])  # the newest: a cut start shows in oldest_s
    out.update(source="journalctl -k -b", readable=True)
    return out


def _restricted() -> str:
    """Why /dev/kmsg refused, where the kernel says: Debian and Ubuntu set dmesg_restrict."""
    try:
        with open("/proc/sys/kernel/dmesg_restrict", encoding="ascii") as f:
            value = f.read(8).strip()
    except OSError:
        return ""
    return f" (kernel.dmesg_restrict={value})" if value.isdigit() else ""


def _user() -> str:
    """Who the probe ran as: the account the operator must give the right to read the log."""
    uid = os.geteuid()
    try:
        import pwd
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name[:64]})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _uptime(proc_root: str) -> float | None:
    try:
        with open(Path(proc_root) / "uptime", encoding="ascii") as f:
            return float(f.read(64).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bounded(out: dict, lines):
    for n, line in enumerate(lines):
        if n >= MAX_RECORDS:
            out["complete"] = False
            return
        yield line


def _kmsg(out: dict):
    """/dev/kmsg's records from the start of the ring, without waiting for new ones."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.lseek(fd, 0, os.SEEK_SET)  # SEEK_DATA's cousin: the oldest record kept
        deadline = time.monotonic() + READ_S
        for _ in range(MAX_RECORDS):
            if time.monotonic() > deadline:
                out["complete"] = False
                return
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return  # read to the end
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten while reading: go on, and say so
                    out["overruns"] += 1
                    continue
                raise
            if not record:
                return
            yield record.decode("utf-8", "replace")
        out["complete"] = False
    finally:
        os.close(fd)


def _seconds(line: str) -> float | None:
    """The time since boot of a kmsg record ("6,1234,5678901,-;...", microseconds) or a
    dmesg/journalctl line ("[ 5678.901234] ...")."""
    m = re.match(r"\s*\[\s*(\d+\.\d+)\]", line)
    if m:  # first: a dmesg line may hold "a, b, c;" in its text
        return float(m.group(1))
    head, sep, _ = line.partition(";")
    if sep and head.count(",") >= 2:
        try:
            return int(head.split(",")[2]) / 1e6
        except ValueError:
            return None
    return None


def _sequence(line: str) -> int | None:
    """A kmsg record's sequence number ("6,1234,..."); None for dmesg or journal text."""
    head, sep, _ = line.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 3:
        return None
    try:
        return int(fields[1])
    except ValueError:
        return None


def _scan(out: dict, lines) -> None:
    last = None
    for line in lines:
        out["records"] += 1
        last = line
        if out["oldest_s"] is None:
            out["oldest_s"] = _seconds(line)
            if out["oldest_s"] is not None:
                out["first_seq"] = _sequence(line)
        if "Xid" not in line:
            continue
        m = XID.search(line)
        s = None if m else SXID.search(line)
        if not m and not s:
            continue
        kind = "xids" if m else "sxids"
        if len(out[kind]) >= MAX_XIDS:
            out["dropped"] += 1
            continue
        if m:
            out["xids"].append({"pci": m.group(1).lower(), "xid": int(m.group(2)),
                                "text": m.group(3).strip()[:TEXT], "t": _seconds(line)})
        else:
            out["sxids"].append({"switch": s.group(1), "pci": s.group(2).lower(),
                                 "sxid": int(s.group(3)), "text": s.group(4).strip()[:TEXT],
                                 "t": _seconds(line)})
    if last is not None:
        out["newest_s"] = _seconds(last)


def edac(sysfs_root: str) -> dict:
    """Corrected and uncorrected memory error counts per memory controller since boot
    (/sys/devices/system/edac/mc/mc*/{ce_count,ue_count}). {present, controllers: {mc:
    {ce, ue}}}: present False where the kernel has no EDAC driver for this platform."""
    base = Path(sysfs_root) / "devices" / "system" / "edac" / "mc"
    out: dict = {"present": False, "controllers": {}}
    try:
        mcs = sorted(p for p in base.iterdir() if re.fullmatch(r"mc\d{1,4}", p.name))[:256]
    except OSError:
        return out
    out["present"] = bool(mcs)
    for mc in mcs:
        counts = {}
        for key, name in (("ce", "ce_count"), ("ue", "ue_count")):
            try:
                counts[key] = int((mc / name).read_text().strip())
            except (OSError, ValueError):
                counts[key] = None
        out["controllers"][mc.name] = counts
    return out


# The kernel's AER statistics of one PCI function, since boot (Documentation/ABI/testing/
# sysfs-bus-pci-devices-aer_stats): a line per error kind and TOTAL_ERR_COR, their sum.
AER_FILE = "aer_dev_correctable"
AER_BYTES = 4096  # the kernel writes about 150 bytes; a larger file is not its own


def aer_correctable(sysfs_root: str, bus_id) -> int | None:
    """The GPU's correctable PCIe errors since boot as the kernel's AER driver counts them
    (TOTAL_ERR_COR of /sys/bus/pci/devices/<domain:bus:dev.fn>/aer_dev_correctable), for
    NVML's bus id ("00000000:3B:00.0"); None where the kernel keeps no such count (no AER
    on the port, an older kernel) or the id is not one."""
    m = re.fullmatch(r"([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-7])",
                     str(bus_id or ""))
    if not m:
        return None
    name = (f"{int(m.group(1), 16):04x}:{int(m.group(2), 16):02x}:"
            f"{int(m.group(3), 16):02x}.{m.group(4)}")
    try:
        with open(Path(sysfs_root) / "bus" / "pci" / "devices" / name / AER_FILE,
                  encoding="ascii", errors="replace") as f:
            text = f.read(AER_BYTES)
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "TOTAL_ERR_COR":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def meminfo(proc_root: str) -> dict:
    """MemTotal and SwapTotal in bytes (None where unreadable)."""
    out = {"memory_bytes": None, "swap_bytes": None}
    keys = {"MemTotal:": "memory_bytes", "SwapTotal:": "swap_bytes"}
    try:
        with open(Path(proc_root) / "meminfo", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] in keys:
                    out[keys[parts[0]]] = int(parts[1]) * 1024
    except (OSError, ValueError):
        pass
    return out


def host_facts(settings: dict) -> dict:
    """What the health check judges of the host: CPUs, memory, swap, EDAC, XIDs."""
    proc_root = str(settings.get("proc_root") or "/proc")
    facts = {"cpus": _cpus(proc_root), **meminfo(proc_root),
             "edac": edac(str(settings.get("sysfs_root") or "/sys")),
             "kernel_log": kernel_xids(settings.get("kernel_log"), proc_root)}
    return facts


def _cpus(proc_root: str) -> int | None:
    """Logical CPUs the kernel brought up (processor entries of cpuinfo), not only those
    this process may use: a node whose BIOS lost a socket shows here."""
    try:
        with open(Path(proc_root) / "cpuinfo", encoding="utf-8") as f:
            count = sum(1 for line in f if line.startswith("processor"))
    except OSError:
        return os.cpu_count()
    return count or os.cpu_count()
