#!/usr/bin/env python3
"""burnin hca probe: every HCA port on its own, where perftest is installed: its loopback
RDMA write bandwidth (`ib_write_bw`) and latency (`ib_write_lat`), each run against
itself (a server and a client on the same device and port), beside the port's rate.

Runs ON a node. Ports: every port under `sysfs_root` (default /sys/class/infiniband,
the kernel's `<hca>/ports/<n>/{state,rate,link_layer}`). For each ACTIVE port, one at a
time: the server (`ib_write_bw -d HCA -i PORT -p TCP_PORT -F --report_gbits -D S -s SIZE`)
is started, then, once it listens on its TCP port, the client (the same, and
`localhost`); likewise `ib_write_lat` with `-n ITERS`. The client's result line is
parsed in perftest's own formats (linux-rdma/perftest src/perftest_parameters.h:
RESULT_FMT_G, " #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]",
and RESULT_FMT_LAT, " #bytes #iterations t_min[usec] t_max[usec] t_typical[usec]
t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]"). One bad port or
cable hides inside a multi-rail all-reduce; here it stands alone.

A node with no RDMA device, or without ib_write_bw, has nothing to measure: the probe
says so (`applies`: false). A port that is not ACTIVE is not measured (the fabric check
fails it); a port whose test fails or prints no result line is reported with the error.

    echo '{"settings": {"seconds": 2}}' | python3 probes/hca.py

Settings: sysfs_root, ib_write_bw and ib_write_lat (commands; names on PATH or paths),
seconds (ib_write_bw -D, 2), size (bytes per write, 65536), lat_iters (1000),
tcp_port (18515, perftest's default; the port used for the exchange), start_timeout_s
(10: how long the server has to start listening).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import probelib

PROBE = "hca"
SYSFS_ROOT = "/sys/class/infiniband"
NUMBER = re.compile(r"^\s*\d+(\s+[\d.]+)+\s*$")


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def sysfs_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def rate_gbps(text: str) -> float | None:
    """sysfs's rate, "400 Gb/sec (4X NDR)", in Gb/s; None when it does not say."""
    m = re.match(r"\s*([\d.]+)\s*Gb/sec", text)
    return float(m.group(1)) if m else None


def ports(root: str) -> list[dict]:
    out = []
    base = Path(root)
    for hca in sorted(base.iterdir()) if base.is_dir() else []:
        for port in sorted((hca / "ports").iterdir()) if (hca / "ports").is_dir() else []:
            state = sysfs_text(port / "state")  # "4: ACTIVE"
            out.append({"hca": hca.name, "port": int(port.name) if port.name.isdigit() else 0,
                        "state": state.partition(":")[2].strip() or state,
                        "rate": sysfs_text(port / "rate"),
                        "rate_gbps": rate_gbps(sysfs_text(port / "rate")),
                        "link_layer": sysfs_text(port / "link_layer")})
    return out


def result_line(text: str, header: str) -> list[float] | None:
    """The numbers of the first result line after the header line holding `header`
    (perftest may print warnings, "Conflicting CPU frequency values", in between)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "#bytes" in line and header in line:
            for row in lines[i + 1:]:
                if NUMBER.match(row):
                    return [float(x) for x in row.split()]
                if row.startswith("-----"):
                    return None
    return None


def parse_bw(text: str) -> dict:
    """ib_write_bw's client output: average and peak Gb/s (--report_gbits)."""
    if "BW average[Gb/sec]" not in text:
        raise ValueError("no result in Gb/sec (perftest's --report_gbits) in its output")
    row = result_line(text, "BW average[Gb/sec]")
    if row is None or len(row) < 4:
        raise ValueError("no result line under ib_write_bw's header")
    return {"bytes": int(row[0]), "iterations": int(row[1]), "peak_gbps": row[2],
            "bw_gbps": row[3]}


def parse_lat(text: str) -> dict:
    """ib_write_lat's output: t_min, t_typical, t_avg, t_max and the 99.9th percentile."""
    row = result_line(text, "t_avg[usec]")
    if row is None or len(row) < 6:
        raise ValueError("no result line under ib_write_lat's header")
    out = {"lat_bytes": int(row[0]), "lat_min_us": row[2], "lat_max_us": row[3],
           "lat_typical_us": row[4], "lat_avg_us": row[5]}
    if len(row) >= 9:
        out["lat_p999_us"] = row[8]
    return out


def listening(port: int) -> bool:
    """Whether something on this host listens on TCP `port` (read from /proc/net: a test
    connection would be the server's one client)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 3 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def pair(command: str, args: list[str], settings: dict, timeout_s: float) -> str:
    """Run a perftest server and its client on this host; the client's output."""
    tcp = int(settings.get("tcp_port", 18515))
    argv = [command, *args, "-p", str(tcp)]
    if listening(tcp):  # another listener would take our client: no measurement of ours
        raise ValueError(f"TCP port {tcp} is already in use on this host (set tcp_port)")
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              preexec_fn=probelib.die_with_parent)
    try:
        deadline = time.monotonic() + float(settings.get("start_timeout_s", 10))
        while not listening(tcp) and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if server.poll() is not None:
            out = server.stdout.read().decode(errors="replace") if server.stdout else ""
            raise ValueError(f"the server exited with status {server.returncode}: "
                             f"{out.strip()[-300:]}")
        client = subprocess.run([*argv, "localhost"], capture_output=True, timeout=timeout_s)
        out = client.stdout.decode(errors="replace")
        if client.returncode != 0:
            raise ValueError(f"the client exited with status {client.returncode}: "
                             f"{(out + client.stderr.decode(errors='replace')).strip()[-300:]}")
        return out
    finally:
        if server.poll() is None:
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def measure(port: dict, settings: dict, bw: str, lat: str) -> dict:
    seconds = float(settings.get("seconds", 2))
    common = ["-d", port["hca"], "-i", str(port["port"]), "-F"]
    out = dict(port)
    try:
        out.update(parse_bw(pair(bw, [*common, "--report_gbits", "-D", f"{seconds:g}", "-s",
                                      str(int(settings.get("size", 65536)))], settings,
                                 seconds + 30)))
        if lat:
            out.update(parse_lat(pair(lat, [*common, "-n", str(int(settings.get(
                "lat_iters", 1000)))], settings, 30)))
    except (ValueError, OSError, subprocess.TimeoutExpired) as e:
        out["error"] = f"{type(e).__name__}: {str(e)[:500]}"
    return out


def main() -> int:
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    settings = payload.get("settings", {})
    node = {"hostname": socket.gethostname()}
    found = ports(settings.get("sysfs_root") or SYSFS_ROOT)
    bw = shutil.which(str(settings.get("ib_write_bw") or "ib_write_bw"))
    lat = shutil.which(str(settings.get("ib_write_lat") or "ib_write_lat")) or ""
    if not found or bw is None:
        why = "no RDMA device" if not found else "ib_write_bw (perftest) is not installed"
        probelib.emit(PROBE, node, [], {"applies": False, "why": why}, [])
        return 0
    results = []
    for port in found:
        if port["state"] != "ACTIVE":
            results.append({**port, "skipped": f"port state {port['state'] or 'unknown'}"})
            continue
        log(f"{port['hca']} port {port['port']} ({port['rate']})")
        results.append(measure(port, settings, bw, lat))
    probelib.emit(PROBE, node, results, {"applies": True, "ib_write_bw": bw,
                                         "ib_write_lat": lat or None}, [])
    return 0


if __name__ == "__main__":
    probelib.finish(main())
