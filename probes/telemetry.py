"""Telemetry for the burn probe: NVML sampled at a fixed interval on every GPU, counters
read before and after (never reset), XID events from an NVML event set; on a CPU node,
what the CPU offers. Runs ON a node: standard library and nvidia-ml-py only.

A reading a GPU does not support is recorded as unsupported (its name listed), never
as zero; any other NVML error is recorded as an error.
"""

from __future__ import annotations

import glob
import os
import threading
import time

import nvlink5
import probelib

# Clock event reasons (nvmlClocksEventReason*): which ones are faults is the judge's call.
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap",
           0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
           0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake", 0x100: "display_clock"}
# nvml.h NVML_NVLINK_MAX_LINKS (36 from NVML 13; 18 links on H100, H200 and B200): links a
# GPU lacks answer NOT_SUPPORTED or INVALID_ARGUMENT.
NVLINK_LINKS = 36
FIELD_VALUE = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
               6: "usVal"}  # nvmlValueType_t -> the member of nvmlValue_t holding it
MAX_XIDS = 1000  # recorded per GPU: burnin/checks/burn.py bounds the output on it


class GpuTelemetry:
    """Samples NVML for the GPUs whose UUIDs are given, until stop()."""

    def __init__(self, nv, uuids: list[str], interval_s: float = 1.0):
        self.nv, self.interval_s = nv, interval_s
        self.stop_event = threading.Event()
        self.started = time.monotonic()
        self.devices = []
        for uuid in uuids:
            d = {"uuid": uuid, "handle": None, "unsupported": set(), "errors": [],
                 "series": {k: [] for k in ("t", "temp_c", "sm_mhz", "mem_mhz", "power_w",
                                            "reasons")}, "xid": [], "static": {},
                 "before": {}, "api": {}}
            self.devices.append(d)
            try:  # a lost GPU, or a UUID NVML does not know, is that device's error alone
                d["handle"] = nv.nvmlDeviceGetHandleByUUID(uuid)
            except nv.NVMLError as e:
                d["errors"].append(f"telemetry: cannot open {uuid} in NVML: {e}")
                continue
            d["static"] = self._static(d)
            d["before"] = self.counters(d)
        self._threads = [threading.Thread(target=self._sample_loop, daemon=True),
                         threading.Thread(target=self._xid_loop, daemon=True)]

    def _read(self, d: dict, name: str, fn, *args):
        return self._read_first(d, name, (fn, args), api=False)

    def _read_first(self, d: dict, name: str, *calls, api: bool = True):
        """The first of `calls` ((function, args after the handle), ...) this driver has
        (probelib.nvml_first); d['api'] says which answered."""
        try:
            value, used = probelib.nvml_first(
                self.nv, *((fn, (d["handle"], *args)) for fn, args in calls))
        except self.nv.NVMLError as e:
            if getattr(e, "value", None) == self.nv.NVML_ERROR_NOT_SUPPORTED:
                d["unsupported"].add(name)
            elif len(d["errors"]) < 20:
                d["errors"].append(f"{name}: {e}")
            return None
        if api:
            d["api"][name] = used
        return value

    def _static(self, d: dict) -> dict:
        nv = self.nv
        limit = self._read(d, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit)
        return {
            "temp_slowdown_c": self._read(d, "temp_slowdown", nv.nvmlDeviceGetTemperatureThreshold,
                                          nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
            "power_limit_w": None if limit is None else limit / 1000.0,
            "pcie_max_gen": self._read(d, "pcie_max_gen", nv.nvmlDeviceGetMaxPcieLinkGeneration),
            "pcie_max_width": self._read(d, "pcie_max_width", nv.nvmlDeviceGetMaxPcieLinkWidth),
        }

    def counters(self, d: dict) -> dict:
        nv = self.nv
        out = {}
        for name, kind in (("ecc_corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                           ("ecc_uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)):
            out[name] = self._read(d, name, nv.nvmlDeviceGetTotalEccErrors, kind,
                                   nv.NVML_VOLATILE_ECC)
        pages = [self._read(d, "retired_pages", nv.nvmlDeviceGetRetiredPages, cause)
                 for cause in (nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                               nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)]
        out["retired_pages"] = None if None in pages else sum(len(p) for p in pages)
        rows = self._read(d, "remapped_rows", nv.nvmlDeviceGetRemappedRows)
        out["remapped_rows"] = None if rows is None else {
            "correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]),
            "failed": bool(rows[3])}
        out["pcie_replay"] = self._read(d, "pcie_replay", nv.nvmlDeviceGetPcieReplayCounter)
        links, out["nvlink_crc"], out["nvlink_recovery"] = self._nvlink(d)
        out["nvlink_active_links"] = links
        return out

    def _nvlink(self, d: dict) -> tuple[int, int | None, int | None]:
        """(active links, CRC errors, recoveries) summed over the active links. A GPU with
        no active link has no NVLink (a PCIe card): unsupported. Where the per-link counter
        calls fail, NVML's field values are tried, and the failed call is recorded: a
        silent 'unsupported' would hide a fabric the fabric check must judge."""
        nv, h = self.nv, d["handle"]
        active = []
        for link in range(NVLINK_LINKS):
            try:
                if nv.nvmlDeviceGetNvLinkState(h, link):
                    active.append(link)
            except nv.NVMLError as e:
                # Not supported, or a link this GPU lacks: absence. Anything else (a lost
                # GPU, a driver error) is a fault to report, never taken for absence.
                if _code(e) not in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_INVALID_ARGUMENT):
                    self._note(d, f"nvlink: {e}")
                    return len(active), None, None
        if not active:
            d["unsupported"].add("nvlink")
            return 0, None, None
        try:
            # NVLink 5 (Blackwell): the COUNT fields, every link at once, as DCGM reads
            # them there (probes/nvlink5.py); an older GPU answers NOT_SUPPORTED.
            crc, recovery = nvlink5.totals(nvlink5.read(nv, h))
            d["api"]["nvlink_counters"] = "NVML_FI_DEV_NVLINK_COUNT_* (all links)"
            return len(active), crc, recovery
        except nv.NVMLError as e:
            why = f"NVLink 5 COUNT fields: {e}"
        try:
            crc = recovery = 0
            for link in active:
                crc += nv.nvmlDeviceGetNvLinkErrorCounter(h, link, nv.NVML_NVLINK_ERROR_DL_CRC_FLIT)
                recovery += nv.nvmlDeviceGetNvLinkErrorCounter(h, link,
                                                               nv.NVML_NVLINK_ERROR_DL_RECOVERY)
            return len(active), crc, recovery
        except nv.NVMLError as e:
            why += f"; nvmlDeviceGetNvLinkErrorCounter: {e}"
        try:
            crc, recovery = self._fields(d, nv.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
                                         nv.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL)
        except nv.NVMLError as e:
            self._note(d, f"nvlink counters: {why}; nvmlDeviceGetFieldValues: {e}")
            return len(active), None, None
        d["unsupported"].add("nvlink_error_counter (read from field values)")
        return len(active), crc, recovery

    def _fields(self, d: dict, *field_ids: int) -> list[int]:
        values = self.nv.nvmlDeviceGetFieldValues(d["handle"], list(field_ids))
        out = []
        for v in values:
            if v.nvmlReturn != 0:
                raise self.nv.NVMLError(v.nvmlReturn)
            out.append(int(getattr(v.value, FIELD_VALUE.get(v.valueType, "ullVal"))))
        return out

    @staticmethod
    def _note(d: dict, message: str) -> None:
        if len(d["errors"]) < 20 and message not in d["errors"]:
            d["errors"].append(message)

    def sample(self) -> None:
        nv = self.nv
        t = round(time.monotonic() - self.started, 3)
        for d in self.devices:
            if d["handle"] is None:
                continue
            s = d["series"]
            power = self._read(d, "power", nv.nvmlDeviceGetPowerUsage)
            s["t"].append(t)
            s["temp_c"].append(self._read_first(d, "temperature", *_temperature_calls(nv)))
            s["sm_mhz"].append(self._read(d, "sm_clock", nv.nvmlDeviceGetClockInfo,
                                          nv.NVML_CLOCK_SM))
            s["mem_mhz"].append(self._read(d, "mem_clock", nv.nvmlDeviceGetClockInfo,
                                           nv.NVML_CLOCK_MEM))
            s["power_w"].append(None if power is None else power / 1000.0)
            s["reasons"].append(self._read_first(d, "clock_event_reasons",
                                                 *_reasons_calls(nv)))

    def _sample_loop(self) -> None:
        while not self.stop_event.is_set():
            began = time.monotonic()
            self.sample()
            self.stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def _xid_loop(self) -> None:
        nv = self.nv
        try:
            events = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            for d in self.devices:
                d["errors"].append(f"xid event set: {e}")
            return
        by_uuid = {}
        for d in self.devices:
            if d["handle"] is None:
                continue
            try:
                nv.nvmlDeviceRegisterEvents(d["handle"], nv.nvmlEventTypeXidCriticalError, events)
                by_uuid[d["uuid"]] = d
            except nv.NVMLError as e:
                if getattr(e, "value", None) == nv.NVML_ERROR_NOT_SUPPORTED:
                    d["unsupported"].add("xid_events")
                else:
                    d["errors"].append(f"xid events: {e}")
        try:
            while by_uuid and not self.stop_event.is_set():
                try:
                    ev = nv.nvmlEventSetWait(events, 500)
                except nv.NVMLError as e:
                    if getattr(e, "value", None) == nv.NVML_ERROR_TIMEOUT:
                        continue
                    raise
                uuid = _text(nv.nvmlDeviceGetUUID(ev.device))
                d = by_uuid.get(uuid)
                if d is not None and len(d["xid"]) < MAX_XIDS:
                    d["xid"].append({"t": round(time.monotonic() - self.started, 3),
                                     "xid": int(ev.eventData)})
                elif d is not None:  # the node fails on its first; a flood is not news
                    self._note(d, f"more than {MAX_XIDS} XID events: the rest not recorded")
        except nv.NVMLError as e:
            for d in self.devices:
                d["errors"].append(f"xid events: {e}")
        finally:
            try:
                nv.nvmlEventSetFree(events)
            except nv.NVMLError:
                pass

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def latest(self, index: int, key: str):
        """The last sampled value of one series of device `index`, or None."""
        values = self.devices[index]["series"][key]
        return values[-1] if values else None

    def pcie_under_load(self) -> None:
        nv = self.nv
        for d in self.devices:
            if d["handle"] is None:
                continue
            d["static"]["pcie_gen"] = self._read(d, "pcie_gen",
                                                 nv.nvmlDeviceGetCurrPcieLinkGeneration)
            d["static"]["pcie_width"] = self._read(d, "pcie_width",
                                                   nv.nvmlDeviceGetCurrPcieLinkWidth)

    def stop(self) -> list[dict]:
        self.stop_event.set()
        for t in self._threads:
            t.join(timeout=5)
        out = []
        for d in self.devices:
            after = self.counters(d) if d["handle"] is not None else {}
            out.append({"uuid": d["uuid"], **d["static"], "series": d["series"],
                        "before": d["before"], "after": after, "xid": d["xid"],
                        "api": d["api"], "unsupported": sorted(d["unsupported"]),
                        "errors": d["errors"]})
        return out


def _code(e) -> int | None:
    return getattr(e, "value", None)


# Each reading under its current name first, then the older one: an R525 driver has only
# nvmlDeviceGetCurrentClocksThrottleReasons, and nvmlDeviceGetTemperatureV comes with
# R570; CUDA 14.0 removes the older names (pynvml says so). getattr: the nvidia-ml-py on a
# node may be older (no new name) or newer (no old name) than the one tested here.
def _reasons_calls(nv) -> tuple:
    return ((getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None), ()),
            (getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None), ()))


def _temperature_calls(nv) -> tuple:
    return ((getattr(nv, "nvmlDeviceGetTemperatureV", None), (nv.NVML_TEMPERATURE_GPU,)),
            (getattr(nv, "nvmlDeviceGetTemperature", None), (nv.NVML_TEMPERATURE_GPU,)))


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


class CpuTelemetry:
    """What a CPU node offers: load, frequency, the hottest thermal zone."""

    def __init__(self, interval_s: float = 1.0):
        self.interval_s = interval_s
        self.started = time.monotonic()
        self.series = {"t": [], "load1": [], "mhz": [], "temp_c": []}
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            s = self.series
            s["t"].append(round(time.monotonic() - self.started, 3))
            s["load1"].append(os.getloadavg()[0])
            s["mhz"].append(_mean(_read_ints("/sys/devices/system/cpu/cpu*/cpufreq/"
                                             "scaling_cur_freq"), 1000.0))
            temps = _read_ints("/sys/class/thermal/thermal_zone*/temp")
            s["temp_c"].append(max(temps) / 1000.0 if temps else None)
            self.stop_event.wait(self.interval_s)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> dict:
        self.stop_event.set()
        self.thread.join(timeout=5)
        unsupported = [k for k in ("mhz", "temp_c") if all(v is None for v in self.series[k])]
        return {"series": self.series, "unsupported": unsupported}


def _read_ints(pattern: str) -> list[int]:
    out = []
    for path in glob.glob(pattern):
        try:
            with open(path, encoding="utf-8") as f:
                out.append(int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return out


def _mean(values: list[int], divisor: float):
    return round(sum(values) / len(values) / divisor, 1) if values else None
