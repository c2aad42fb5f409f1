"""How each check's document gives the wear counters the ledger keeps for the replace-soon
list (burnin/figures/wear.py keeps them, burnin/figures/replace_soon.py reads their
trend). Here, among the checks, because it reads their documents by their names.

Each counter is read from one check's document only, so that one series never mixes two
ways of counting (the burn's volatile ECC against health's lifetime one):

  health   ecc_corrected (lifetime, ecc_corrected_aggregate), remapped_rows (rows
           remapped for uncorrectable errors, lifetime), remap_pending and remap_failed
           (0 or 1), retired_pages (lifetime), pcie_replay (since the driver loaded),
           xid_warning (XIDs of the classes that leave a GPU in service, in the kernel log
           since boot: burnin/model/xid.py)
  fabric   nvlink_crc (CRC flit and data errors over the links), nvlink_replay
  burn     thermal_margin (the slowdown threshold less the hottest sample, °C)

"""

from __future__ import annotations

import math
from collections.abc import Callable

from burnin.checks.host import pci_key
from burnin.model.xid import in_service

MAX_DEVICES = 16
MAX_VALUE = 1e15  # larger is no honest count: not kept

Wear = dict[str, dict[str, float]]


def count(v) -> float | None:
    """A count as kept: a finite number no larger than MAX_VALUE, or None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if not math.isfinite(v) or abs(v) > MAX_VALUE:
        return None
    return float(v)


READ = "_read"  # in a Wear being made: {counter: {}} of the counters read


def _put(out: Wear, counter: str, device: str, value, keep_zero: bool = False) -> None:
    v = count(value)
    if v is None:
        return
    out.setdefault(READ, {})[counter] = 1.0
    if v == 0 and not keep_zero:
        return
    per = out.setdefault(counter, {})
    if device in per or len(per) < MAX_DEVICES:
        per[device] = v


def _index(dev: dict) -> str:
    i = dev.get("index")
    return str(i) if isinstance(i, int) and not isinstance(i, bool) else str(dev.get("device"))[:16]


def of_health(data: dict) -> Wear:
    out: Wear = {}
    devices = [d for d in data.get("devices") or () if isinstance(d, dict)]
    for dev in devices:
        i = _index(dev)
        _put(out, "ecc_corrected", i, dev.get("ecc_corrected_aggregate"))
        rows = dev.get("remapped_rows")
        rows = rows if isinstance(rows, dict) else {}
        _put(out, "remapped_rows", i, rows.get("uncorrectable"))
        if rows:
            _put(out, "remap_pending", i, int(rows.get("pending") is True))
            _put(out, "remap_failed", i, int(rows.get("failed") is True))
        _put(out, "retired_pages", i, dev.get("retired_pages"))
        _put(out, "pcie_replay", i, dev.get("pcie_replay"))
        _put(out, "pcie_aer_correctable", i, dev.get("pcie_aer_correctable"))
    host = (data.get("figures") or {}).get("host") or {}
    log = host.get("kernel_log") if isinstance(host, dict) else None
    xids = log.get("xids") if isinstance(log, dict) else None
    if isinstance(log, dict) and isinstance(xids, list):
        by_pci = {pci_key(d.get("pci_bus_id")): _index(d) for d in devices
                  if pci_key(d.get("pci_bus_id"))}
        counts: dict[str, int] = {}
        if log.get("readable") is True:
            out.setdefault(READ, {})["xid_warning"] = 1.0
        for x in xids:
            if isinstance(x, dict) and isinstance(x.get("xid"), int) and in_service(x["xid"]):
                where = by_pci.get(pci_key(x.get("pci")), "node")
                counts[where] = counts.get(where, 0) + 1
        for where, n in counts.items():
            _put(out, "xid_warning", where, n)
    return out


def of_fabric(data: dict) -> Wear:
    out: Wear = {}
    for dev in data.get("devices") or ():
        if not isinstance(dev, dict) or not isinstance(dev.get("nvlink"), dict):
            continue
        links = dev["nvlink"].get("counters")
        if not isinstance(links, dict):
            continue
        crc: float | None = None
        replay: float | None = None
        for link, counters in links.items():
            if link == "all" or not isinstance(counters, dict):
                continue
            for k in ("crc_flit", "crc_data"):
                if count(counters.get(k)) is not None:
                    crc = (crc or 0.0) + float(counters[k])
            if count(counters.get("replay")) is not None:
                replay = (replay or 0.0) + float(counters["replay"])
        _put(out, "nvlink_crc", _index(dev), crc)
        _put(out, "nvlink_replay", _index(dev), replay)
    return out


def of_burn(data: dict) -> Wear:
    out: Wear = {}
    margins = []
    for dev in data.get("devices") or ():
        tel = dev.get("telemetry") if isinstance(dev, dict) else None
        if not isinstance(tel, dict):
            continue
        temps = [t for t in (tel.get("series") or {}).get("temp_c") or ()
                 if count(t) is not None]
        slowdown = count(tel.get("temp_slowdown_c"))
        if temps and slowdown:
            margins.append(slowdown - max(temps))
    if margins:
        _put(out, "thermal_margin", "node", min(margins), keep_zero=True)
    return out


# check: how its document's wear counters are read
SOURCES: dict[str, Callable[[dict], Wear]] = {
    "health": of_health, "fabric": of_fabric, "burn": of_burn}


