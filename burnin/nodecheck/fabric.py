"""Fabric: the node's HCAs present (as many as the inventory's `hcas:`), and every port
ACTIVE and LinkUp at its rate (checks.fabric.rate_gbps where set), read from sysfs
(/sys/class/infiniband, or checks.fabric.sysfs_root) as the fabric probe reads it. Error
counters are not read: their growth needs a window, which is the run's fabric check."""

from __future__ import annotations

import os

from burnin.nodecheck.model import CheckResult, fail

CHECK = "fabric"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(256).strip()
    except OSError:
        return None


def _word(text: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE'."""
    return None if text is None else text.partition(":")[2].strip() or text.strip()


def check(root: str, hcas: int | None, rate_gbps: float | None) -> CheckResult:
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        names = []
    except OSError as e:
        return CheckResult(CHECK, (fail(CHECK, f"{root} cannot be listed: "
                                               f"{e.strerror or e}"),))
    findings = []
    if hcas is not None and len(names) != hcas:
        listed = f" ({', '.join(names[:8])})" if names else ""
        findings.append(fail(CHECK, f"{len(names)} HCAs{listed}, inventory says {hcas}"))
    for name in names[:256]:
        ports = os.path.join(root, name, "ports")
        try:
            numbers = sorted(os.listdir(ports), key=lambda p: p.zfill(8))
        except OSError as e:
            findings.append(fail(CHECK, f"{name}: its ports cannot be listed "
                                        f"({e.strerror or e})"))
            continue
        for number in numbers[:64]:
            d = os.path.join(ports, number)
            state, phys = _word(_read(f"{d}/state")), _word(_read(f"{d}/phys_state"))
            rate = _read(f"{d}/rate")
            where = f"{name} port {number}"
            if state != "ACTIVE" or phys != "LinkUp":
                findings.append(fail(CHECK, f"{where}: state {state or 'unreadable'}, "
                                            f"physical state {phys or 'unreadable'}, "
                                            f"expected ACTIVE and LinkUp"))
                continue
            if rate_gbps is not None:
                try:
                    gbps = float((rate or "").split()[0])
                except (ValueError, IndexError):
                    gbps = None
                if gbps is None or gbps < rate_gbps:
                    findings.append(fail(CHECK, f"{where}: rate {rate or 'unreadable'}, below "
                                                f"{rate_gbps:g} Gb/s (checks.fabric.rate_gbps)"))
    return CheckResult(CHECK, tuple(findings))
