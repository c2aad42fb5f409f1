"""The health check's configuration rules: a node admitted to production is configured as
its peers are and as the inventory pins it. Per GPU: persistence mode on, MIG mode and
compute mode as the settings say, no compute process already on it, the power limit at
its default (or `power_limit_w`), the VBIOS the inventory's `expect:` pins; per node: the
driver and CUDA versions `expect:` pins. Each rule reads what the health probe gathered;
a reading the GPU does not support is not judged."""

from __future__ import annotations

from burnin.model.nodes import Node

# nvml.h nvmlComputeMode_t
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def device_drift(gpu: str, dev: dict, node: Node, settings: dict) -> list[str]:
    """Failures of one GPU's configuration; `gpu` is how the messages name it."""
    out = []
    if settings.get("persistence_mode", True) and dev.get("persistence_mode") == 0:
        out.append(f"{gpu}: persistence mode is off, expected on")
    out += _mig(gpu, dev, bool(settings.get("mig_mode", False)))
    mode = dev.get("compute_mode")
    want = settings.get("compute_mode", "default")
    if mode is not None and COMPUTE_MODES.get(mode, str(mode)) != want:
        out.append(f"{gpu}: compute mode {COMPUTE_MODES.get(mode, mode)}, expected {want}")
    procs = dev.get("processes") or []
    if procs:
        listed = ", ".join(f"pid {p['pid']}" + (f" ({p['used_memory'] >> 20} MiB)"
                                                if p.get("used_memory") is not None else "")
                           for p in procs[:8])
        more = f" and {len(procs) - 8} more" if len(procs) > 8 else ""
        out.append(f"{gpu}: {len(procs)} compute process(es) already on the GPU before the "
                   f"checks: {listed}{more}; expected none")
    out += _power(gpu, dev, settings.get("power_limit_w"))
    vbios = node.expect.get("vbios")
    if vbios and dev.get("vbios") is not None and dev["vbios"] != vbios:
        out.append(f"{gpu}: VBIOS {dev['vbios']}, the inventory expects {vbios}")
    return out


def _mig(gpu: str, dev: dict, want: bool) -> list[str]:
    current, pending = dev.get("mig_mode_current"), dev.get("mig_mode_pending")
    if current is None:
        return [f"{gpu}: MIG mode cannot be read (not supported), expected on"] if want else []
    if bool(current) == want:
        return []
    after = f" (pending {_on(bool(pending))} after a reset)" if pending is not None \
        and bool(pending) != bool(current) else ""
    if current:  # the cause of the GPUs torch then lacks: say it first, in these words
        return [f"MIG is on for {gpu}{after}, expected off: CUDA sees MIG devices in its "
                "place, not the GPU"]
    return [f"{gpu}: MIG mode is {_on(bool(current))}{after}, expected {_on(want)}"]


def _power(gpu: str, dev: dict, want_w) -> list[str]:
    limit = dev.get("power_limit_mw")
    if limit is None:
        return []
    if want_w is not None:
        want_mw, source = want_w * 1000, "the power_limit_w setting"
    elif dev.get("power_default_limit_mw") is not None:
        want_mw, source = dev["power_default_limit_mw"], "the GPU's default limit"
    else:
        return []
    if abs(limit - want_mw) >= 1000:  # NVML's limits are in mW; a watt apart is a setting
        return [f"{gpu}: power limit {limit / 1000:g} W, expected {want_mw / 1000:g} W "
                f"({source})"]
    return []


def pinned_versions(node: Node, driver: str | None, cuda: str | None) -> list[str]:
    """The node's driver and CUDA versions against the inventory's `expect:`."""
    out = []
    for what, mine in (("driver", driver), ("cuda", cuda)):
        want = node.expect.get(what)
        if want and mine != want:
            out.append(f"{what} version {mine or 'unknown'}, the inventory expects {want}")
    return out
