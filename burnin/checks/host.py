"""The health check's host rules: what the node around the GPUs must be. XIDs and NVSwitch
SXids in the kernel log since boot (named by GPU or switch, with NVIDIA's meaning and
action: burnin/model/xid.py), and the span of time the log read covers; application or locked
GPU clocks unless declared; the CPU count and memory as the settings declare or as most
nodes of the same model have; swap as declared; EDAC memory error counts. Each rule reads
what the health probe gathered (probes/hostfacts.py); none decides on the node."""

from __future__ import annotations

from burnin.checks.base import ECC, XID
from burnin.model import xid
from burnin.model.nodes import Node

GIB = 1 << 30
# nvml.h: nvmlClocksEventReasonApplicationsClocksSetting, also user-defined (locked) clocks
APPLICATIONS_CLOCKS_SETTING = 0x2


def pci_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of NVML's "00000000:3B:00.0" or the kernel's "0000:3b:00"."""
    if not bus_id:
        return None
    parts = bus_id.split(".")[0].split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
    except ValueError:
        return None


# dmesg or journal text has no sequence numbers: its first message is the boot's when it
# is stamped 0.000000 s, so a start past this says the older messages are gone.
WRAP_S = 1.0
GONE = {"/dev/kmsg": "the kernel's ring buffer had overwritten the older messages",
        "journalctl -k -b": "the journal no longer holds the older messages"}
NOT_READ = ("kernel log not read (checks.health.kernel_log: off): XIDs and NVSwitch SXids "
            "since boot not checked, so a GPU or NVSwitch that logged a fault since boot "
            "(fallen off the bus, a double-bit ECC error, an NVLink error) passes health; "
            "burn still fails any XID NVML reports during its own load")


def kernel_log_rules(devices: list[dict], log: dict, gpu_node: bool,
                     name_of) -> tuple[list[str], list[str]]:
    """(failures, warnings) of the kernel log since boot: XIDs per GPU and code, NVSwitch
    SXids per switch and code, and which span of time the log read covered."""
    if not log:
        return [], []
    if not log.get("readable"):
        if not gpu_node:
            return [], []
        if log.get("source") == "off":
            return [], [NOT_READ]
        who = log.get("user") or "the probe's account"
        return [f"kernel log unreadable as {who}, so XIDs and NVSwitch SXids since boot "
                f"cannot be checked ({log.get('error') or 'no reason given'}): give that "
                f"account the right to read it (root or CAP_SYSLOG for /dev/kmsg; group adm "
                f"or systemd-journal for journalctl -k), or set checks.health.kernel_log: "
                f"off"], []
    failures, warnings = _xids(devices, log.get("xids") or [], name_of)
    more = _sxids(log.get("sxids") or [])
    failures += more[0]
    warnings += more[1] + _window(log)
    if log.get("dropped"):
        warnings.append(f"{log['dropped']} more XID or SXid lines in the kernel log were "
                        f"not read")
    return failures, warnings


def _said(events: list[dict]) -> str:
    last = events[-1]
    when = f" at {last['t']:.0f} s after boot" if last.get("t") is not None else ""
    times = f", {len(events)} times" if len(events) > 1 else ""
    said = f": {last['text']!r}" if last.get("text") else ""
    return f"in the kernel log since boot{times}, last{when}{said}"


def _xids(devices: list[dict], xids: list[dict], name_of) -> tuple[list[str], list[str]]:
    by_pci = {pci_key(d.get("pci_bus_id")): d for d in devices if pci_key(d.get("pci_bus_id"))}
    seen: dict[tuple[str, int], list[dict]] = {}
    for x in xids:
        dev = by_pci.get(pci_key(x["pci"]))
        where = name_of(dev) if dev else f"PCI {x['pci']} (no GPU of this node there now)"
        seen.setdefault((where, x["xid"]), []).append(x)
    failures, warnings = [], []
    for (where, code), events in seen.items():
        line = f"{where}: {xid.meaning(code)} {_said(events)}"
        if code == 154:
            # The driver's summary of what the GPU needs now: the last one stands.
            action = xid.recovery_action(events[-1].get("text", ""))
            if action is None:
                failures.append(XID(f"{line}; not the driver's format, so the recovery action "
                                    "it asks for is unknown"))
            elif action[0] == 0:
                warnings.append(f"{line}; the driver's recovery action is back to None")
            else:
                failures.append(XID(f"{line}; the driver asks for "
                                    f"{action[1] or hex(action[0])}"))
            continue
        why = xid.FAULT_BY_TEXT.get(code) or xid.IN_SERVICE_BY_TEXT.get(code)
        line += f"; NVIDIA's immediate action: {xid.immediate_action(code)}"
        line += f" ({why})" if why else ""
        (warnings if xid.in_service(code) else failures).append(XID(line))
    return failures, warnings


def _sxids(sxids: list[dict]) -> tuple[list[str], list[str]]:
    seen: dict[tuple[str, int], list[dict]] = {}
    for x in sxids:
        seen.setdefault((f"NVSwitch {x['switch']} (PCI {x['pci']})", x["sxid"]), []).append(x)
    failures: list[str] = []
    warnings: list[str] = []
    for (where, code), events in seen.items():
        line = f"{where}: {xid.sxid_meaning(code)} {_said(events)}"
        ok = all(xid.sxid_in_service(code, e.get("text", "")) for e in events)
        (warnings if ok else failures).append(XID(line))
    return failures, warnings


def _window(log: dict) -> list[str]:
    """The span of time the log read covers, where it is not 'since boot'."""
    out = []
    oldest, seq = log.get("oldest_s"), log.get("first_seq")
    wrapped = (seq > 0) if seq is not None else (oldest is not None and oldest > WRAP_S)
    if wrapped and oldest is not None:
        # The node's own log (not a file): its uptime is how long "since boot" would be.
        up = log.get("uptime_s") if log.get("source") in GONE else None
        of = f" (up {_span(up)})" if up else ""
        source = log.get("source")
        why = GONE.get(source, "the file begins there") if source is not None \
            else "the file begins there"
        out.append(f"kernel log ({log.get('source')}) read from {_span(oldest)} after boot, "
                   f"not from boot{of}: {why}, so XIDs and SXids of the first "
                   f"{_span(oldest)} are not checked")
    if log.get("overruns"):
        out.append(f"{log['overruns']} kernel log records were overwritten while being read: "
                   f"XIDs and SXids in them are not checked")
    if log.get("complete") is False:
        last = log.get("newest_s")
        at = f" at {_span(last)} after boot" if last is not None else ""
        out.append(f"kernel log read stopped at its bound{at}: later XIDs and SXids are not "
                   f"checked")
    return out


def _span(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def clock_rules(name: str, dev: dict, settings: dict) -> list[str]:
    """Application or locked clocks on a GPU whose settings do not declare them."""
    if settings.get("custom_clocks"):
        return []
    out = []
    clocks = dev.get("clocks") or {}
    for what in ("graphics", "memory"):
        now, default = clocks.get(f"{what}_applications"), clocks.get(f"{what}_default")
        if now is not None and default is not None and now != default:
            out.append(f"{name}: {what} application clock set to {now} MHz, default "
                       f"{default} MHz (declare it with checks.health.custom_clocks: true)")
    reasons = dev.get("clock_event_reasons")
    if reasons is not None and reasons & APPLICATIONS_CLOCKS_SETTING and not out:
        out.append(f"{name}: clocks held by the applications-clocks setting at rest (locked "
                   f"or application clocks; declare them with checks.health.custom_clocks: "
                   f"true)")
    return out


def host_rules(node: Node, host: dict, settings: dict, fleet: dict,
               model_key: str) -> tuple[list[str], list[str]]:
    """(failures, warnings) of the host: CPUs, memory, swap, EDAC."""
    failures: list[str] = []
    warnings: list[str] = []
    cpus, want = host.get("cpus"), settings.get("cpus")
    common, nodes = (fleet.get("cpus") or {}).get(model_key, (None, 0))
    if cpus is not None and want is not None and cpus != want:
        failures.append(f"{cpus} CPUs, the settings declare {want}")
    elif cpus is not None and want is None and common is not None and nodes >= 2 \
            and cpus != common:
        failures.append(f"{cpus} CPUs, most of the run's {nodes} nodes of this model have "
                        f"{common}")
    failures += _memory(host.get("memory_bytes"), settings, fleet, model_key)
    swap, want_swap = host.get("swap_bytes"), settings.get("swap_gib")
    if swap is not None and want_swap is not None and (
            (want_swap == 0 and swap) or abs(swap - want_swap * GIB) > 0.05 * want_swap * GIB):
        failures.append(f"swap {swap / GIB:.1f} GiB, the settings declare {want_swap:g} GiB")
    edac = host.get("edac") or {}
    bound = settings.get("max_edac_corrected", 100)
    for mc, counts in (edac.get("controllers") or {}).items():
        if counts.get("ue"):
            failures.append(ECC(f"EDAC {mc}: {counts['ue']} uncorrected memory errors since "
                                "boot"))
        ce = counts.get("ce") or 0
        if ce > bound:
            failures.append(f"EDAC {mc}: {ce} corrected memory errors since boot, more than "
                            f"{bound} (max_edac_corrected)")
        elif ce:
            warnings.append(f"EDAC {mc}: {ce} corrected memory errors since boot")
    return failures, warnings


def _memory(mine: int | None, settings: dict, fleet: dict, model_key: str) -> list[str]:
    """MemTotal leaves out what firmware and the kernel keep, so memory is judged within
    memory_tolerance of the declared size or of most nodes' (in whole GiB)."""
    if mine is None:
        return []
    tolerance = settings.get("memory_tolerance", 0.05)
    want = settings.get("memory_gib")
    if want is not None:
        if abs(mine / GIB - want) > tolerance * want:
            return [f"memory {mine / GIB:.1f} GiB, the settings declare {want:g} GiB "
                    f"(within {tolerance:.0%})"]
        return []
    common, nodes = (fleet.get("memory_gib") or {}).get(model_key, (None, 0))
    if common is None or nodes < 2:
        return []
    if abs(round(mine / GIB) - common) > tolerance * common:
        return [f"memory {mine / GIB:.1f} GiB, most of the run's {nodes} nodes of this model "
                f"have {common} GiB"]
    return []
