"""XIDs and NVSwitch SXids in the kernel log since the last node-check: the health probe's
reader (probes/hostfacts.py) and the health check's rules (burnin/checks/host.py, with
NVIDIA's catalogue in burnin/model/xid.py), over the events newer than the cursor, which is the
kernel time of the newest record the last check read in this boot. So an XID is reported
once: by the first node-check (Prolog, Epilog or HealthCheckProgram) that reads it. A
cursor past the log's end cannot come from a read of this log: it is a `state` finding,
and the log is read from boot."""

from __future__ import annotations

from burnin.checks.host import kernel_log_rules
from burnin.nodecheck.model import CheckResult, Finding, fail, warn
from burnin.nodecheck.probelink import hostfacts

CHECK = "xid"


def check(where: str | bool | None, gpu_node: bool, cursor: float | None) -> CheckResult:
    """`where`: checks.health.kernel_log; `cursor`: seconds since boot of the newest record
    the last node-check of this boot read (None: read from boot)."""
    log = hostfacts().kernel_xids(where)
    if not log.get("readable"):
        failures, warnings = kernel_log_rules([], log, gpu_node, _name)
        return CheckResult(CHECK, tuple([fail(CHECK, t) for t in failures]
                                        + [warn(CHECK, t) for t in warnings]),
                           state={"cursor": cursor})

    newest = log.get("newest_s")
    reset = cursor is not None and newest is not None and cursor > newest
    bogus: tuple = ()
    if reset:
        # The log's end is the newest record there is: a cursor past it was never read
        # there, and trusting it would hide every XID until the kernel's clock reaches it.
        bogus = (Finding("state", f"node-check's cursor {cursor:g} s is past the kernel "
                                  f"log's end ({newest:g} s): read from boot again",
                         event=True),)
        cursor = None

    def new(events: list[dict]) -> list[dict]:
        if cursor is None:
            return events
        # An event without a time (a dmesg line without stamps) cannot be placed: new.
        return [e for e in events if e.get("t") is None or e["t"] > cursor]

    fresh = {**log, "xids": new(log.get("xids") or []), "sxids": new(log.get("sxids") or [])}
    if cursor is not None:  # the span was judged on the first read of this boot
        fresh.update(oldest_s=0.0, first_seq=0, overruns=0)
    devices = [{"pci_bus_id": x["pci"]} for x in fresh["xids"]]
    failures, warnings = kernel_log_rules(devices, fresh, gpu_node, _name)
    return CheckResult(CHECK, bogus + tuple([fail(CHECK, t, event=True) for t in failures]
                                            + [warn(CHECK, t) for t in warnings]),
                       state={"cursor": newest if newest is not None else cursor,
                              "reset": reset})


def _name(dev: dict) -> str:
    return f"GPU at PCI {dev.get('pci_bus_id')}"
