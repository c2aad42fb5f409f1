#!/usr/bin/env python3
"""burnin fabric probe: the node's InfiniBand / RoCE ports and its GPUs' NVLink links.

Runs ON a node. Standard library, and nvidia-ml-py (pynvml) for NVLink when present.
Measures and never decides: the controller judges.

- Ports: every HCA under `sysfs_root` (default /sys/class/infiniband), every port's
  state, phys_state, rate and link_layer, and its error counters read twice, `window_s`
  apart: a counter that grows while the node is up is the signal, a high lifetime value
  only a hint. A node with no HCA reads nothing and does not wait.
- NVLink: per GPU (NVML order), the links NVML knows (up to nvml.h's
  NVML_NVLINK_MAX_LINKS, 36), which of them are active (nvmlDeviceGetNvLinkState), and
  each link's error counters, read around the same window: on NVLink 5 (Blackwell) the
  link's NVML_FI_DEV_NVLINK_COUNT_* error fields with the link as scope
  (probes/nvlink5.py); before it, replay, recovery, CRC flit and data
  (nvmlDeviceGetNvLinkErrorCounter). Not read on a CPU-only node (`gpus: 0`).
- Under load: the health probe, the run's first, takes snapshot() of the same counters
  before the load, and the controller gives it back to this probe as `baseline` when it
  runs after the load: the counters' growth is then over the run's burn, storage and
  all-reduce, and there is no quiet window to wait for.

    echo '{"settings": {"window_s": 2}}' | python3 probes/fabric.py

Settings (optional): sysfs_root (/sys/class/infiniband), window_s (seconds between the
two counter reads when there is no baseline; 5).
"""

from __future__ import annotations

import os
import time

import nvlink5
import probelib

PROBE = "fabric"
SYSFS_ROOT = "/sys/class/infiniband"
# The port error counters of the InfiniBand PortCounters attribute, as the kernel names
# them under ports/<n>/counters/ (RoCE ports have the same files).
COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
            "port_xmit_discards", "excessive_buffer_overrun_errors",
            "local_link_integrity_errors")
NVLINK_MAX_LINKS = 36  # nvml.h NVML_NVLINK_MAX_LINKS (NVML 13; it was 18 before Blackwell)
# nvml.h nvmlNvLinkErrorCounter_t, in its order: NVML_NVLINK_ERROR_DL_REPLAY = 0, ...
NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _coded(text: str | None) -> tuple[int | None, str | None]:
    """'4: ACTIVE' -> (4, 'ACTIVE'); a bare word -> (None, word)."""
    if text is None:
        return None, None
    code, sep, word = text.partition(":")
    if sep and code.strip().isdigit():
        return int(code), word.strip()
    return None, text


def _rate_gbps(text: str | None) -> float | None:
    """'400 Gb/sec (4X NDR)' -> 400.0."""
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


def counters(port_dir: str) -> dict[str, int]:
    out = {}
    for name in COUNTERS:
        raw = _read(os.path.join(port_dir, "counters", name))
        if raw is not None and raw.isdigit():
            out[name] = int(raw)
    return out


def ports(root: str) -> tuple[list[dict], list[str]]:
    """Every HCA under `root` with its ports' state and a first counter reading."""
    hcas, errors = [], []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [f"{root}: {e}"]
    for name in names:
        base = os.path.join(root, name, "ports")
        try:
            numbers = sorted(os.listdir(base), key=lambda p: (not p.isdigit(), p.zfill(8)))
        except OSError as e:
            errors.append(f"{name}: cannot list its ports ({e})")
            hcas.append({"name": name, "ports": []})
            continue
        hca = {"name": name, "ports": []}
        for number in numbers:
            d = os.path.join(base, number)
            code, state = _coded(_read(os.path.join(d, "state")))
            phys_code, phys = _coded(_read(os.path.join(d, "phys_state")))
            rate = _read(os.path.join(d, "rate"))
            hca["ports"].append({
                "port": number, "state": state, "state_code": code, "phys_state": phys,
                "phys_state_code": phys_code, "rate": rate, "rate_gbps": _rate_gbps(rate),
                "link_layer": _read(os.path.join(d, "link_layer")),
                "before": counters(d), "_dir": d})
        hcas.append(hca)
    return hcas, errors


def second_read(hcas: list[dict]) -> None:
    for hca in hcas:
        for port in hca["ports"]:
            port["after"] = counters(port.pop("_dir"))
            port["growth"] = {k: port["after"][k] - v for k, v in port["before"].items()
                              if k in port["after"]}


def nvlink(payload: dict) -> tuple[list[dict], dict]:
    """Per GPU: its NVLink links and which are active. ([], why) where NVML is absent."""
    if payload.get("gpus") == 0:
        return [], {"read": False, "why": "a CPU-only node (gpus: 0)"}
    try:
        import pynvml as nv
    except ImportError as e:
        return [], {"read": False, "why": f"nvidia-ml-py is not installed ({e})"}
    try:
        nv.nvmlInit()
    except (nv.NVMLError, OSError) as e:
        return [], {"read": False, "why": f"NVML did not initialise: {e}"}
    devices = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            devices.append(_nvlink_device(nv, i))
    except nv.NVMLError as e:
        return devices, {"read": False, "why": f"NVML: {e}"}
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass
    return devices, {"read": True}


def _nvlink_device(nv, index: int) -> dict:
    dev: dict = {"device": str(index), "index": index}
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        dev["name"] = _text(nv.nvmlDeviceGetName(h))
        dev["uuid"] = _text(nv.nvmlDeviceGetUUID(h))
    except nv.NVMLError as e:
        dev["error"] = f"NVML: {e}"
        return dev
    links, down = 0, []
    for link in range(NVLINK_MAX_LINKS):
        try:
            active = nv.nvmlDeviceGetNvLinkState(h, link)
        except nv.NVMLError as e:
            if link == 0 and getattr(e, "value", None) != nv.NVML_ERROR_NOT_SUPPORTED:
                dev["error"] = f"nvmlDeviceGetNvLinkState: {e}"
            break  # no NVLink (NOT_SUPPORTED on link 0), or past the GPU's last link
        links += 1
        if active != nv.NVML_FEATURE_ENABLED:
            down.append(link)
    dev["nvlink"] = {"links": links, "active": links - len(down), "down": down,
                     "counters": _link_counters(nv, h, links)}
    return dev


def _link_counters(nv, h, links: int) -> dict[str, dict[str, int]]:
    """{link: {counter: value}} of every link whose counters NVML gives: on NVLink 5 the
    link's COUNT fields (probes/nvlink5.py), and under "all" the GPU-wide data ECC total
    and BERs; else the DL counters of nvmlDeviceGetNvLinkErrorCounter.

    NVLink 5 is decided from any link, not from link 0 alone: a link that is down may
    refuse its fields, and the others must still be read as NVLink 5 (nvml.h: Blackwell
    does not support the DL counters, so a fallback would leave them unjudged)."""
    five: dict[str, dict[str, int]] = {}
    for link in range(links):
        try:
            five[str(link)] = nvlink5.read(nv, h, scope=link)
        except nv.NVMLError:
            continue  # this link's fields not given (down, or no NVLink 5): see below
    if five:
        try:
            five["all"] = nvlink5.read_gpu(nv, h)
        except nv.NVMLError:
            pass  # a driver without the BER fields: the per-link counters stand
        return five
    out = {}
    for link in range(links):
        values = {}
        for code, name in enumerate(NVLINK_COUNTERS):
            try:
                values[name] = int(nv.nvmlDeviceGetNvLinkErrorCounter(h, link, code))
            except nv.NVMLError:
                continue  # not supported on this GPU or link: not judged
        if values:
            out[str(link)] = values
    return out


def snapshot(root: str, payload: dict) -> dict:
    """The counters as they are now, for a later run of this probe to judge growth from:
    {t, ib: {"hca/port": counters}, nvlink: {uuid: {link: counters}}, errors}."""
    hcas, errors = ports(root)
    devices, _ = nvlink(payload)
    return {"t": time.time(),
            "ib": {f"{h['name']}/{p['port']}": p["before"] for h in hcas for p in h["ports"]},
            "nvlink": {d["uuid"]: d["nvlink"]["counters"] for d in devices
                       if d.get("uuid") and "nvlink" in d},
            "errors": errors[:16]}


def _baseline(payload: dict) -> dict | None:
    """The health probe's snapshot the controller passed, if it is one."""
    b = payload.get("baseline")
    if isinstance(b, dict) and isinstance(b.get("t"), (int, float)) \
            and isinstance(b.get("ib"), dict) and isinstance(b.get("nvlink"), dict):
        return b
    return None


def _counts(value) -> dict[str, int]:
    return {k: v for k, v in value.items() if isinstance(v, int)} \
        if isinstance(value, dict) else {}


def nvlink_growth(devices: list[dict], before: dict) -> None:
    """Each device's link counters' growth since `before` ({uuid: {link: counters}})."""
    for dev in devices:
        links = dev.get("nvlink")
        was = before.get(dev.get("uuid")) if links else None
        if not isinstance(was, dict):
            continue
        growth = {}
        for link, now in links["counters"].items():
            old = _counts(was.get(link))
            grew = {k: v - old[k] for k, v in now.items()
                    if k in old and v != old[k] and k not in nvlink5.BER}
            if grew:
                growth[link] = grew
        links["growth"] = growth


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def main() -> int:
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    settings = payload.get("settings", {})
    root = settings.get("sysfs_root") or SYSFS_ROOT
    started = time.time()
    baseline = _baseline(payload)
    hcas, errors = ports(root)
    devices, nv = nvlink(payload)
    if baseline is not None:
        since, window = "baseline", max(0.0, started - baseline["t"])
        for hca in hcas:
            for port in hca["ports"]:
                was = _counts(baseline["ib"].get(f"{hca['name']}/{port['port']}"))
                port["before"] = was or port["before"]
        before = baseline["nvlink"]
        log(f"counters against the health probe's, {window:.0f} s ago")
    else:
        since, window = "window", float(settings.get("window_s", 5))
        before = {d["uuid"]: d["nvlink"]["counters"] for d in devices
                  if d.get("uuid") and "nvlink" in d}
        if any(h["ports"] for h in hcas) or any(before.values()):
            log(f"{len(hcas)} HCA(s) under {root}; counters read again in {window:g} s")
            time.sleep(window)
            devices, nv = nvlink(payload)
        else:
            log(f"no HCA port under {root}, no NVLink counter")
            window = 0.0
    second_read(hcas)
    nvlink_growth(devices, before)
    errors += [f"{d['device']}: {d['error']}" for d in devices if "error" in d]
    probelib.emit(PROBE, {"hostname": os.uname()[1]}, devices, {
        "ib": {"root": root, "hcas": hcas, "window_s": round(window, 3), "since": since},
        "nvlink": nv, "elapsed_s": round(time.time() - started, 3)}, errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
