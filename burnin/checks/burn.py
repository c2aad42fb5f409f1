"""The burn check's judge: the node held full load without a hardware event, at the speed
of its peers. Telemetry rules are pure functions of the recorded series, so that they
can be tested against recorded series without a GPU."""

from __future__ import annotations

import functools
import statistics

from burnin.checks.base import (
    DEVICE_COUNT,
    DTYPE,
    ECC,
    PEER_SPREADS,
    PEERS,
    VERIFY_EVERY,
    WRONG_RESULT,
    XID,
    Check,
    Figure,
    Fleet,
    Judging,
    Measure,
    Setting,
    count_problem,
    device_tflops,
    implausible,
    node_spread,
    peer_bound,
)
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict, like
from burnin.model.xid import meaning
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import (
    COUNT,
    MESSAGES,
    NULL_COUNT,
    Bool,
    Int,
    List,
    Num,
    Obj,
    Scalar,
    Str,
    document,
)

# Clock event reasons that mean the GPU was slowed by a fault, not by policy: a
# software power cap alone is the GPU working as configured.
FAULT_REASONS = {0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown",
                 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake"}


# An SM clock no GPU runs at: a reading outside this is no reading (and a node's series
# of 1e308 must not overflow the mean of its own clocks, nor the fleet's median).
PLAUSIBLE_MHZ = (0.0, 100_000.0)


def _mean_clock(dev: dict) -> float | None:
    lo, hi = PLAUSIBLE_MHZ
    clocks = [c for c in ((dev.get("telemetry") or {}).get("series") or {}).get("sm_mhz", [])
              if isinstance(c, (int, float)) and lo <= c <= hi]
    return statistics.fmean(clocks) if clocks else None


def fleet_summary(fleet: Fleet) -> dict[str, dict]:
    """Once per run: per device model, the median over nodes of each node's median
    TFLOPS and mean SM clock. Each node is one vote, and a node whose device count is
    wrong or whose figures are beyond the model's peak does not vote: it cannot drag
    the median and make its honest peers stragglers."""
    by_model: dict[str, dict[str, list]] = {}
    for name, o in fleet.voters():
        mine: dict[str, dict[str, list]] = {}
        for dev in o.data["devices"]:
            if "error" in dev or not dev.get("tflops"):
                continue
            if implausible(dev["tflops"], fleet.models.get(name)):
                mine = {}
                break
            m = mine.setdefault(dev.get("name") or "?", {"tflops": [], "clock": []})
            m["tflops"].append(dev["tflops"])
            if _mean_clock(dev) is not None:
                m["clock"].append(_mean_clock(dev))
        for model, v in mine.items():
            m = by_model.setdefault(model, {"tflops": [], "clock": []})
            m["tflops"].append(statistics.median(v["tflops"]))
            if v["clock"]:
                m["clock"].append(statistics.median(v["clock"]))
        for model, v in mine.items():
            by_model[model].setdefault("devices", []).append(v["tflops"])
    out = {}
    for name, v in by_model.items():
        tflops = statistics.median(v["tflops"])
        out[name] = {"tflops": tflops, "nodes": len(v["tflops"]),
                     "clock": statistics.median(v["clock"]) if v["clock"] else None,
                     # how far devices stray from the fleet's median, and from their own
                     # node's: the noise a healthy fleet shows in this run
                     "spread": node_spread(v["devices"], tflops),
                     "within": node_spread([d for d in v["devices"] if len(d) > 1])}
    return out



def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    summary, settings = j.fleet, j.settings
    if not outcome.ok:
        return Verdict(node.name, "burn", (outcome.reason,))
    failures = [f"probe error on {e}" for e in outcome.data["errors"]]
    failures += count_problem(outcome.data["devices"], j)
    warnings: list[str] = []
    devices = [d for d in outcome.data["devices"] if "error" not in d]
    for dev in devices:
        odd = implausible(dev.get("tflops"), j.model)
        if odd:
            failures.append(WRONG_RESULT(f"{dev['device']} ({dev.get('name')}): {odd}"))
    node_median = {name: statistics.median(d["tflops"] for d in devices if d.get("name") == name)
                   for name in {d.get("name") for d in devices}}
    floor = settings.get("min_tflops") or (j.model.burn_tflops if j.model else None)
    for dev in devices:
        where = f"{dev['device']} ({dev.get('name')})"
        f, w = device_rules(dev, settings, floor, summary.get(dev.get("name"), {}),
                            node_median.get(dev.get("name")), len(devices))
        failures += [like(f"{where}: {x}", x) for x in f]
        warnings += [f"{where}: {x}" for x in w]
    if any(1 < summary.get(d.get("name"), {}).get("nodes", 0) < PEERS for d in devices):
        warnings.append(f"fewer than {PEERS} nodes of this model reported: of two that "
                        "differ neither is the odd one out, so no comparison with peers; "
                        "judged against the model's floor alone")
    return Verdict(node.name, "burn", tuple(failures), tuple(warnings),
                   floors={} if floor is None else {"burn": floor})


def device_rules(dev: dict, settings: dict, floor: float | None, fleet: dict,
                 node_median: float | None, node_devices: int) -> tuple[list, list]:
    """(failures, warnings) of one device: throughput, then telemetry."""
    fail, warn = [], []
    tflops = dev.get("tflops", 0.0)
    if dev.get("mismatched_products"):
        fail.append(WRONG_RESULT(
            f"{dev['mismatched_products']} of {dev['verified']} verified products differ "
            f"from the first ({dev['mismatched_elements']} elements), expected bitwise "
            "identical"))
    if floor is not None and tflops < floor:
        fail.append(f"{tflops:.1f} TFLOPS, below the floor of {floor:g} TFLOPS")
    fraction = settings.get("peer_fraction", 0.9)
    spreads = settings.get("peer_spreads", PEER_SPREADS)
    peers = fleet.get("nodes", 0) >= PEERS
    bound, words = peer_bound(fleet["tflops"], fleet.get("spread"), fraction, spreads,
                              "TFLOPS") if peers else (0.0, "")
    if peers and tflops < bound:
        fail.append(f"straggler: {tflops:.3f} TFLOPS, below {words}, the median of the "
                    f"run's {fleet['nodes']} nodes with this model")
    elif node_devices >= 2 and node_median:
        bound, words = peer_bound(node_median, fleet.get("within"), fraction, spreads,
                                  "TFLOPS")
        if tflops < bound:
            fail.append(f"straggler: {tflops:.3f} TFLOPS, below {words}, the median of the "
                        f"node's {node_devices} devices")
    tel = dev.get("telemetry")
    if tel:
        lo, hi = PLAUSIBLE_MHZ
        odd = [c for c in (tel.get("series") or {}).get("sm_mhz") or ()
               if isinstance(c, (int, float)) and not lo <= c <= hi]
        if odd:
            fail.append(f"telemetry reads an SM clock of {odd[0]:g} MHz, which no GPU runs "
                        "at: its readings cannot be trusted")
        f, w = telemetry_rules(tel, settings)
        fail += f
        warn += w
        clock = _mean_clock(dev)
        cf = settings.get("clock_fraction", 0.9)
        if clock is not None and fleet.get("clock") and clock < cf * fleet["clock"]:
            fail.append(f"mean SM clock {clock:.0f} MHz, below {cf:g} x {fleet['clock']:.0f} MHz,"
                        " the median of the run's nodes with this model")
    return fail, warn


def telemetry_rules(tel: dict, settings: dict) -> tuple[list[str], list[str]]:
    """(failures, warnings) from one GPU's recorded telemetry."""
    fail, warn = [], []
    for x in tel.get("xid", []):
        fail.append(XID(f"{meaning(x['xid'])} at {x['t']:.0f} s into the burn"))
    before, after = tel.get("before") or {}, tel.get("after") or {}

    def delta(key):
        if before.get(key) is None or after.get(key) is None:
            return None
        return after[key] - before[key]

    unc = delta("ecc_uncorrected")
    if unc:
        fail.append(ECC(f"{unc} new uncorrectable ECC errors during the burn, expected 0"))
    rows = after.get("remapped_rows") or {}
    if rows.get("pending"):
        fail.append(ECC("row remap pending after the burn, expected none"))
    if rows.get("failed"):
        fail.append(ECC("row remap failed, expected none"))
    series = tel.get("series") or {}
    reasons = [r for r in series.get("reasons", []) if r is not None]
    for bit, name in FAULT_REASONS.items():
        hits = sum(1 for r in reasons if r & bit)
        if hits:
            fail.append(f"clock event {name} in {hits} of {len(reasons)} samples")
    temps = [t for t in series.get("temp_c", []) if t is not None]
    slowdown = tel.get("temp_slowdown_c")
    if temps and slowdown and max(temps) >= slowdown:
        fail.append(f"temperature reached {max(temps)} C, at or above the slowdown "
                    f"threshold of {slowdown} C")
    for what in ("gen", "width"):
        now, top = tel.get(f"pcie_{what}"), tel.get(f"pcie_max_{what}")
        if now is not None and top is not None and now < top:
            fail.append(f"PCIe link {what} {now} under load, max {top}")
    for key, limit_key, label in (
            ("ecc_corrected", "max_correctable_ecc", "correctable ECC errors"),
            ("pcie_replay", "max_pcie_replays", "PCIe replays"),
            ("nvlink_crc", "max_nvlink_errors", "NVLink CRC errors"),
            ("nvlink_recovery", "max_nvlink_errors", "NVLink recoveries")):
        d = delta(key)
        limit = settings.get(limit_key, 100)
        if d and d > limit:
            fail.append(f"{d} {label} during the burn, above the limit of {limit}")
        elif d:
            warn.append(f"{d} {label} during the burn (limit {limit})")
    return fail, warn


def figures(record: dict) -> list[Figure]:
    out = []
    for dev in record["data"]["devices"]:
        device = str(dev.get("device"))
        if dev.get("tflops") is not None:
            out.append(Figure("device_tflops", (("check", "burn"), ("device", device)),
                              dev["tflops"], "Sustained GEMM throughput per device"))
        temps = [t for t in ((dev.get("telemetry") or {}).get("series") or {})
                 .get("temp_c", []) if t is not None]
        if temps:
            out.append(Figure("gpu_temperature_max_celsius", (("device", device),),
                              max(temps), "Hottest GPU temperature during the burn",
                              better="lower"))
    return out


# What an honest burn document can reach. Each sample adds to each device's record six
# telemetry values (t, temp_c, sm_mhz, mem_mhz, power_w, reasons) and one [t, tflops]
# pair; as json.dump writes them, at their widest (t to 3 decimals of a run of hours, a
# 64-bit reasons mask, power to the milliwatt, TFLOPS to 6 digits, each with ", "):
# 12 + 5 + 6 + 7 + 12 + 22 + 28 = 92 bytes. 128 leaves room. A probe cannot sample past
# its own kill at timeout_s; the CPU's telemetry (4 series) counts as one more device;
# each device's fixed fields and errors, and the document's own, get a fixed allowance.
BYTES_PER_SAMPLE = 128
DEVICE_BYTES = 64 << 10
DOCUMENT_BYTES = 1 << 20


# A `gpus: auto` node whose health failed has no known count (and fails admission
# anyway): its burn may print what 8 GPUs' honestly can, not what 64 could.
UNKNOWN_DEVICES = 8


def samples_bound(settings: dict) -> int:
    """The most samples a probe can take before its kill at timeout_s."""
    return int(float(settings["timeout_s"]) / float(settings["sample_s"])) + 2


def output_bound(settings: dict, devices: int | None) -> int:
    """The bytes a burn probe may print on a node with these settings and devices
    (None: unknown)."""
    records = (UNKNOWN_DEVICES if devices is None else devices) + 1
    return records * (samples_bound(settings) * BYTES_PER_SAMPLE + DEVICE_BYTES) + DOCUMENT_BYTES


COUNTERS = Obj(ecc_corrected=NULL_COUNT, ecc_uncorrected=NULL_COUNT, retired_pages=NULL_COUNT,
               remapped_rows=Obj(correctable=COUNT, uncorrectable=COUNT, pending=Bool(),
                                 failed=Bool(), null=True),
               pcie_replay=NULL_COUNT, nvlink_active_links=NULL_COUNT, nvlink_crc=NULL_COUNT,
               nvlink_recovery=NULL_COUNT, null=True)


@functools.lru_cache(maxsize=16)
def shape(samples: int) -> Obj:
    """The burn document with series of at most `samples` values: one of 3 MB of small
    numbers fits the byte bound, but parsed it is ten times that, kept for the whole run."""
    series = List(Num(null=True), max=samples)
    telemetry = Obj(uuid=Str(256, null=True), temp_slowdown_c=Num(null=True),
                    power_limit_w=Num(null=True), pcie_gen=Int(null=True),
                    pcie_max_gen=Int(null=True), pcie_width=Int(null=True),
                    pcie_max_width=Int(null=True), series=Obj(values=series, max_keys=16),
                    before=COUNTERS, after=COUNTERS,
                    xid=List(Obj(t=Num(), xid=COUNT), max=1000),
                    unsupported=MESSAGES, errors=MESSAGES)
    device = Obj(device=Str(64), name=Str(256, null=True), uuid=Str(256, null=True),
                 tflops=Num(0, 1e5),
                 tflops_series=List(List(Num(), min=2, max=2), max=samples),
                 products=COUNT, verified=COUNT, mismatched_products=COUNT,
                 mismatched_elements=COUNT, telemetry=telemetry, error=Str(4096))
    return document(device, Obj(cpu_telemetry=Obj(series=Obj(values=series, max_keys=16),
                                                  unsupported=MESSAGES),
                                duration_s=Scalar(), sample_s=Scalar()))


def schema_bound(settings: dict, devices: int | None) -> Obj:
    return shape(samples_bound(settings))


SCHEMA = shape(1_000_000)  # the shape whatever the settings; runs use schema_bound


def evidence(record: dict) -> dict[str, object]:
    data = record["data"]
    series = {str(d.get("device")): d.get("telemetry") for d in data.get("devices", [])
              if d.get("telemetry")}
    cpu = data.get("figures", {}).get("cpu_telemetry")
    if cpu:
        series["cpu"] = cpu
    return {"telemetry.json": series}


TFLOPS = device_tflops("burn: sustained TFLOPS per device", speed=True)
HOTTEST = Measure("gpu_temperature_max_celsius", "°C", "hottest GPU °C", "hottest °C {device}",
                  worst="high", chart="burn: hottest temperature per GPU", key="temp",
                  per_model=True, zero=False, span=20)
CHECK = Check(
    name="burn", page="burnin.report.summary.burn_part:burn", page_order=20,
    fleet_page="burnin.report.summary.fleet_checks:burn",
    measures=(TFLOPS, HOTTEST), evidence=evidence, doc="the node holds full load",
    judge=judge, schema=SCHEMA, failure_kinds=(WRONG_RESULT, XID, ECC, DEVICE_COUNT),
    summarize=fleet_summary, figures=figures, output_bound=output_bound,
    schema_bound=schema_bound, settings={
        "timeout_s": Setting("positive", None, "default: 2 x duration_s + 300"),
        "duration_s": Setting("positive", {"quick": 60, "standard": 600, "extended": 3600}),
        "n": Setting("int", None, "matrix size; default 8192 on GPU, 1024 on CPU"),
        "dtype": Setting(DTYPE, None, "bf16|fp16|fp32; default bf16 on GPU, fp32 on CPU"),
        "sample_s": Setting("positive", 1.0, "telemetry and throughput interval"),
        "verify_every": Setting(VERIFY_EVERY, "auto"),
        "memory_fraction": Setting("positive", 0.5),
        "buffers": Setting("int", 4),
        "min_tflops": Setting("positive", None, "default: the gpu_model's floor"),
        "peer_fraction": Setting("fraction", 0.9,
                                 "fail below this share of the same model's median (lower "
                                 "where the run's devices spread wider); 0 turns it off"),
        "peer_spreads": Setting("positive", PEER_SPREADS,
                                "robust spreads of the run's own devices a device may fall "
                                "below the median"),
        "clock_fraction": Setting("fraction", 0.9,
                                  "fail a mean SM clock below this share of peers'"),
        "max_correctable_ecc": Setting("int", 100, "warn above 0, fail above this"),
        "max_pcie_replays": Setting("int", 100, "warn above 0, fail above this"),
        "max_nvlink_errors": Setting("int", 100, "CRC + recovery; warn above 0"),
    })
