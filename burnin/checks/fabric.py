"""The fabric check's judge: the node's InfiniBand / RoCE ports and its GPUs' NVLink.

Ports: as many HCAs as the inventory's `hcas:` (or the run's majority, each node one
vote); every port ACTIVE and LinkUp at the expected rate (`rate_gbps`, or the run's
majority); no port flapped (link_downed grew) and no error counter grew by more than
`max_error_growth`; a high lifetime count only warns. A node with no HCA where none is
expected (`hcas: 0`, or unset and no majority above 0): the port rules do not apply.
NVLink: every GPU has its model's `nvlink_links` active, and its link counters judged as
DCGM's health watch judges them (NVIDIA/DCGM v4.6.0, modules/health/DcgmHealthWatch.cpp;
limits in common/DcgmGPUHardwareLimits.h). On NVLink 5 (Blackwell; probes/nvlink5.py):
any growth of a COUNT error field (206-211, 215, 219, symbol errors 221) or of the data
ECC total (160) fails (DCGM_LIMIT_MAX_NVLINK_ERROR, 1), a failed recovery (214) fails, a
successful one (213) and transmit discards (212) warn; the symbol and effective BER (222,
220) fail past DCGM's thresholds. Before NVLink 5: replay or recovery growth of 1 fails,
CRC errors fail at `max_nvlink_crc_per_s` (DCGM_LIMIT_MAX_NVLINK_CRC_ERROR, 100 per
second) over the window and warn below it.

Growth is over the run's load: fabric runs after the burn, storage and the intra-node
all-reduce, against the counters the health probe read before them (Check.baseline);
where health did not run on the node in this run, over the probe's own quiet `window_s`.
"""

from __future__ import annotations

from collections import Counter

from burnin.checks.base import (
    DEVICE_COUNT,
    Check,
    Figure,
    Fleet,
    Judging,
    Setting,
    count_problem,
    timeout,
)
from burnin.checks.base import device_name as where
from burnin.model.gpu_reference import GPU_MODELS
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict, majority
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, Bool, Int, List, Num, Obj, Str, document


def _hcas(outcome: ProbeOutcome) -> list[dict]:
    return outcome.data["figures"]["ib"]["hcas"]


def _node_rates(outcome: ProbeOutcome) -> dict[str, float]:
    """Per link layer, the rate most of the node's ports of that layer run at: a node's
    storage NIC (RoCE, say 200G) is not held to its compute HCAs' rate (400G NDR)."""
    by_layer: dict[str, Counter] = {}
    for h in _hcas(outcome):
        for p in h["ports"]:
            if p.get("rate_gbps"):
                by_layer.setdefault(p.get("link_layer") or "", Counter())[p["rate_gbps"]] += 1
    return {layer: rates.most_common(1)[0][0] for layer, rates in by_layer.items()}


def fleet_summary(fleet: Fleet) -> dict:
    """Once per run: the majority HCA count, and per link layer the majority port rate,
    as (value, why, nodes), each node one vote (a node's rate of a layer: the one most of
    its ports of that layer run at)."""
    ok = {n: o for n, o in fleet.outcomes.items() if o.ok}
    counts = {n: len(_hcas(o)) for n, o in ok.items()}
    per_layer: dict[str, dict[str, float]] = {}
    for n, o in ok.items():
        for layer, rate in _node_rates(o).items():
            per_layer.setdefault(layer, {})[n] = rate
    return {"hcas": (*majority(counts), len(counts)),
            "rate": {layer: (*majority(rates), len(rates)) for layer, rates in per_layer.items()}}


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "fabric", (outcome.reason,))
    data = outcome.data
    failures = [f"probe error: {e}" for e in data["errors"]]
    warnings: list[str] = []
    summary = j.fleet or {"hcas": (None, "", 0), "rate": {}}
    ib = data["figures"]["ib"]
    hcas = ib["hcas"]
    expected, source = _expected_hcas(node, summary)
    if hcas or expected:
        if expected is not None and len(hcas) != expected:
            names = ", ".join(h["name"] for h in hcas) or "none"
            failures.append(f"{len(hcas)} HCA(s) under {ib['root']} ({names}), expected "
                            f"{expected} ({source})")
        for hca in hcas:
            if not hca["ports"]:
                failures.append(f"{hca['name']}: no port")
            for port in hca["ports"]:
                rate, rate_source = _expected_rate(j.settings, summary,
                                                   port.get("link_layer") or "")
                f, w = _port_rules(hca["name"], port, rate, rate_source, _over(ib),
                                   j.settings)
                failures += f
                warnings += w
    failures += _nvlink_rules(data, j)
    f, w = _nvlink_growth(data["devices"], ib, j.settings)
    return Verdict(node.name, "fabric", tuple(failures + f), tuple(warnings + w))


def _over(ib: dict) -> str:
    """The window the counters grew over, in words."""
    if ib.get("since") == "baseline":
        return f"since the health check {ib['window_s']:.0f} s earlier, over the run's load"
    return f"in {ib['window_s']:g} s"


# Counters whose growth of 1 fails (DCGM_LIMIT_MAX_NVLINK_ERROR): NVLink 5's COUNT error
# fields and data ECC total, as MonitorNVLink5Fields reads them, its failed recoveries
# (MonitorNVLinkErrorFields, DCGM_HEALTH_RESULT_FAIL), and before NVLink 5 the DL replay
# and recovery counters (MonitorNVLink: "Replay and recovery errors are failures").
FAIL_AT_ONE = {
    "malformed_packet_errors": "malformed packets",        # NVML field 206
    "buffer_overrun_errors": "packets dropped",            # 207
    "rcv_errors": "receive errors",                        # 208
    "rcv_remote_errors": "remote receive errors",          # 209
    "rcv_general_errors": "general receive errors",        # 210
    "local_link_integrity_errors": "link integrity errors",  # 211
    "link_recovery_events": "the link retrained",          # 215
    "link_recovery_failed_events": "a link recovery failed",  # 214
    "effective_errors": "errors left after FEC",           # 219
    "symbol_errors": "symbol errors: FEC did not fix them",  # 221
    "ecc_data_errors": "data ECC errors",                  # 160
    "replay": "the link replayed",                         # DL replay, before NVLink 5
    "recovery": "the link retrained",                      # DL recovery, before NVLink 5
}
# Warned at any growth: a successful recovery (DCGM_HEALTH_RESULT_WARN) and transmit
# discards (read, not in DCGM's NVLink 5 list).
WARN = ("link_recovery_successful_events", "xmit_discards")
# Before NVLink 5, CRC errors fail only at a rate (DcgmHealthWatch.cpp MonitorNVLink:
# "CRC errors are only an error if more than 100 are happening per second").
RATED = ("crc_flit", "crc_data")
# NVLink 5's BERs, GPU-wide (the link "all"), as NVML packs them: nvml.h
# NVML_NVLINK_BER_MANTISSA_SHIFT 8 / WIDTH 0xf, NVML_NVLINK_BER_EXP_SHIFT 0 / WIDTH 0xff;
# the value is mantissa x 10^-exponent (DcgmUtilities.cpp NvmlBerParser).
BER = ("effective_ber", "symbol_ber")
# DCGM_SYMBOL_BER_FLOOR_EXP_AGGREGATED (DcgmGPUHardwareLimits.h): the symbol BER's floor
# where it is read over every link (Blackwell), with a floor mantissa of 15.
SYMBOL_BER_FLOOR_EXP = 238


def ber_parts(raw: int) -> tuple[int, int]:
    """(mantissa, exponent) of a BER NVML packs into an integer."""
    return (raw >> 8) & 0xF, raw & 0xFF


def effective_ber_exceeded(mantissa: int, exponent: int) -> bool:
    """DCGM's IsEffectiveBerThresholdExceeded (common/DcgmUtilities.cpp): worse than
    1e-12; (15, 255) is its zero BER. A mantissa of 0 is a BER of 0 too."""
    if mantissa == 0 or (mantissa == 15 and exponent == 255):
        return False
    return exponent < 12 or (exponent == 12 and mantissa > 1) or (
        exponent == 13 and mantissa > 10)


def symbol_ber_exceeded(mantissa: int, exponent: int) -> bool:
    """DCGM's IsSymbolBerThresholdExceeded (DcgmHealthWatch.cpp) at the aggregated floor."""
    if mantissa == 0:
        return False
    if exponent == SYMBOL_BER_FLOOR_EXP:
        return mantissa > 15
    return exponent < SYMBOL_BER_FLOOR_EXP


def _link_order(link: str) -> tuple[int, str]:
    """Links in number order; a key that is no number (a hostile document) last."""
    return (int(link), "") if link.isdigit() else (1 << 30, link)


def _nvlink_growth(devices: list[dict], ib: dict, settings: dict
                   ) -> tuple[list[str], list[str]]:
    """Each link's counter growth, and each GPU's BERs, as DCGM judges them."""
    over = _over(ib)
    window = ib.get("window_s") or 0.0
    rate_bound = settings.get("max_nvlink_crc_per_s", 100)
    failures, warnings = [], []
    for dev in devices:
        nvlink = dev.get("nvlink") or {}
        growth = nvlink.get("growth") or {}
        for link, grew in sorted(growth.items(), key=lambda kv: _link_order(kv[0])):
            at = f"GPU {where(dev)} NVLink link {link}"
            for counter, n in sorted(grew.items()):
                line = f"{at}: {counter} grew by {n} {over}"
                if n <= 0:
                    continue
                if counter in FAIL_AT_ONE:
                    failures.append(f"{line}: {FAIL_AT_ONE[counter]}")
                elif counter in RATED:
                    per_s = n / window if window > 0 else float("inf")
                    if per_s >= rate_bound:
                        failures.append(f"{line}: {per_s:.3g} per second, at least "
                                        f"{rate_bound:g}")
                    else:
                        warnings.append(line)
                else:
                    warnings.append(line)
        gpu_wide = (nvlink.get("counters") or {}).get("all") or {}
        for name, exceeded, bound in (
                ("symbol_ber", symbol_ber_exceeded, f"1e-{SYMBOL_BER_FLOOR_EXP}"),
                ("effective_ber", effective_ber_exceeded, "1e-12")):
            raw = gpu_wide.get(name)
            if isinstance(raw, int) and exceeded(*ber_parts(raw)):
                m, e = ber_parts(raw)
                failures.append(f"GPU {where(dev)} NVLink: {name.replace('_', ' ')} "
                                f"{m}e-{e}, worse than {bound} (DCGM's threshold)")
    return failures, warnings


def _expected_hcas(node: Node, summary: dict) -> tuple[int | None, str]:
    if node.hcas is not None:
        return node.hcas, "the inventory's hcas"
    common, why, nodes = summary["hcas"]
    if nodes < 2:
        return None, ""
    if common is None:
        return None, why
    return common, f"most of the run's {nodes} nodes"


def _expected_rate(settings: dict, summary: dict, layer: str) -> tuple[float | None, str]:
    if settings.get("rate_gbps"):
        return settings["rate_gbps"], "the rate_gbps setting"
    common, _, nodes = summary["rate"].get(layer, (None, "", 0))
    if common is None or nodes < 2:
        return None, ""
    of = f" {layer}" if layer else ""
    return common, f"the{of} rate of most of the run's {nodes} nodes"


def _port_rules(hca: str, port: dict, rate: float | None, source: str, over: str,
                settings: dict) -> tuple[list[str], list[str]]:
    at = f"{hca} port {port['port']}"
    failures, warnings = [], []
    if port.get("state") != "ACTIVE":
        failures.append(f"{at}: state {port.get('state')}, expected ACTIVE")
    if port.get("phys_state") != "LinkUp":
        failures.append(f"{at}: phys_state {port.get('phys_state')}, expected LinkUp")
    got = port.get("rate_gbps")
    if rate is not None and (got is None or got < rate):
        failures.append(f"{at}: rate {port.get('rate')}, expected {rate:g} Gb/sec ({source})")
    growth = port.get("growth") or {}
    bound = settings.get("max_error_growth", 0)
    for counter, grew in sorted(growth.items()):
        if counter == "link_downed" and grew > 0:
            failures.append(f"{at}: link_downed grew by {grew} {over}: the port flapped")
        elif grew > bound:
            failures.append(f"{at}: {counter} grew by {grew} {over}, more than {bound:g}")
    lifetime = settings.get("lifetime_warn", 100)
    for counter, value in sorted((port.get("before") or {}).items()):
        if lifetime and value >= lifetime:
            warnings.append(f"{at}: {counter} is {value} over the port's lifetime "
                            f"(warned from {lifetime:g})")
    return failures, warnings


def _nvlink_rules(data: dict, j: Judging) -> list[str]:
    if not j.gpus:
        return []
    devices = data["devices"]
    nv = data["figures"]["nvlink"]
    if not nv.get("read"):
        return [f"NVLink not read: {nv.get('why')}"] if _links_for(j, None) else []
    out = count_problem(devices, j)
    for dev in devices:
        want = _links_for(j, dev.get("name"))
        links = dev.get("nvlink") or {}
        if want is None or "error" in dev:
            continue
        active = links.get("active", 0)
        if active < want:
            down = links.get("down") or []
            which = f" (down: link {', '.join(map(str, down))})" if down else ""
            out.append(f"GPU {where(dev)}: {active} NVLink link(s) active of "
                       f"{links.get('links', 0)}, expected {want}{which}")
    return out


def _links_for(j: Judging, name: str | None) -> int | None:
    """NVLink links a GPU must have active: the setting, the node's gpu_model's figure,
    or the built-in model NVML's name matches; None: no rule."""
    if j.settings.get("nvlink_links") is not None:
        return j.settings["nvlink_links"]
    if j.model is not None:
        return j.model.nvlink_links
    for model in GPU_MODELS.values():
        if name and model.matches(name):
            return model.nvlink_links
    return None


def figures(record: dict) -> list[Figure]:
    """Each name ends in its unit (a ratio, GB/s, errors), as metrics.prom's base-unit
    names want: the rate is the port's Gb/sec over 8."""
    out = []
    for hca in record["data"]["figures"]["ib"]["hcas"]:
        for port in hca["ports"]:
            labels = (("hca", hca["name"]), ("port", str(port["port"])))
            out.append(Figure("fabric_port_active_ratio", labels,
                              1.0 if port.get("state") == "ACTIVE" else 0.0,
                              "1 when the HCA port is ACTIVE, else 0"))
            if port.get("rate_gbps") is not None:
                out.append(Figure("fabric_port_rate_gbps", labels, port["rate_gbps"] / 8,
                                  "the port's link rate, GB/s (its Gb/sec over 8)"))
            for counter, grew in (port.get("growth") or {}).items():
                out.append(Figure("fabric_port_new_errors", (*labels, ("counter", counter)),
                                  grew, "error counter growth over the probe's window"))
    for dev in record["data"]["devices"]:
        links = dev.get("nvlink") or {}
        if links.get("links"):
            out.append(Figure("nvlink_active_ratio", (("device", dev["device"]),),  # + UUID
                              links["active"] / links["links"],
                              "share of the GPU's NVLink links that are active"))
        for link, grew in (links.get("growth") or {}).items():
            for counter, n in grew.items():
                out.append(Figure("nvlink_new_errors", (("device", dev["device"]),
                                                        ("link", link), ("counter", counter)),
                                  n, "NVLink error counter growth over the run"))
    return out


def evidence(record: dict) -> dict[str, object]:
    figs = record["data"]["figures"]
    return {"fabric.json": {"ib": figs["ib"], "nvlink": figs["nvlink"],
                            "devices": record["data"]["devices"]}}


# A port's error counters: the probe reads seven (probes/fabric.py COUNTERS); room for a
# few more a newer probe may add, but not for a node claiming a thousand.
COUNTERS = 16
PORT = Obj(port=Str(64), state=Str(256, null=True), state_code=Int(null=True),
           phys_state=Str(256, null=True), phys_state_code=Int(null=True),
           rate=Str(256, null=True), rate_gbps=Num(0, 1e6, null=True),
           link_layer=Str(256, null=True), before=Obj(values=COUNT, max_keys=COUNTERS),
           after=Obj(values=COUNT, max_keys=COUNTERS),
           growth=Obj(values=Int(-2**63, 2**63), max_keys=COUNTERS))
HCA = Obj(required=("name", "ports"), name=Str(256), ports=List(PORT, max=16))
# {link: {counter: n}}: four DL counters, or NVLink 5's twelve COUNT fields and, under
# "all", the GPU's data ECC total and BERs (probes/nvlink5.py)
LINK_COUNTERS = Obj(values=Obj(values=COUNT, max_keys=16), max_keys=64)
DEVICE = Obj(device=Str(64), index=Int(0, 1023), name=Str(256), uuid=Str(256),
             error=Str(4096), nvlink=Obj(links=Int(0, 64), active=Int(0, 64),
                                         down=List(Int(0, 64), max=64),
                                         counters=LINK_COUNTERS,
                                         growth=Obj(values=Obj(values=Int(-2**63, 2**63),
                                                               max_keys=16), max_keys=64)))
# What the health probe reads before the load (probes/fabric.py snapshot()).
SNAPSHOT = Obj(required=("t", "ib", "nvlink"), t=Num(), errors=List(Str(4096), max=16),
               ib=Obj(values=Obj(values=COUNT, max_keys=16), max_keys=4096),
               nvlink=Obj(values=LINK_COUNTERS, max_keys=64))
SCHEMA = document(DEVICE, Obj(
    required=("ib", "nvlink"),
    ib=Obj(required=("root", "hcas", "window_s"), root=Str(4096),
           hcas=List(HCA, max=256), window_s=Num(0), since=Str(16)),
    nvlink=Obj(required=("read",), read=Bool(), why=Str(4096)), elapsed_s=Num(0)))

CHECK = Check(
    name="fabric", page="burnin.report.summary.checks:fabric", page_order=80,
    doc="the node's fabric ports and NVLink links are up at their rate",
    judge=judge, schema=SCHEMA, summarize=fleet_summary, figures=figures, evidence=evidence,
    failure_kinds=(DEVICE_COUNT,),
    baseline=lambda settings: {"sysfs_root": settings["sysfs_root"]},
    settings={
        "timeout_s": timeout(120, 180, 300),
        "sysfs_root": Setting("str", "/sys/class/infiniband", "where the HCAs are listed"),
        "window_s": Setting("positive", {"quick": 2, "standard": 10, "extended": 60},
                            "seconds between the two counter reads where health did not "
                            "read them before the load"),
        "rate_gbps": Setting("positive", None,
                             "every port's rate at the least; default: the run's majority"),
        "max_error_growth": Setting("int", 0, "growth of a port error counter over the "
                                    "window that fails the node (link_downed: any)"),
        "lifetime_warn": Setting("int", 100, "a port error counter's lifetime value that "
                                 "warns; 0: never"),
        "max_nvlink_crc_per_s": Setting("positive", 100, "CRC errors per second of an "
                                        "NVLink link before NVLink 5 that fail (DCGM's "
                                        "limit; fewer warn)"),
        "nvlink_links": Setting("int", None, "active NVLink links per GPU; default: the "
                                "gpu_model's nvlink_links"),
    })
