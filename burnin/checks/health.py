"""The health check's judge: is the node what the inventory says, and are its GPUs sound?

Fails the node when: the probe failed; torch is missing; the GPU count or model differs
from the inventory; ECC is off; any uncorrectable ECC error since the driver loaded; a
row remap is pending or has failed; retired pages are pending; a PCIe link is below its
max width or generation (generation read under load); the driver or torch version
differs from the majority of the run's nodes.
"""

from __future__ import annotations

from burnin.inventory import Node
from burnin.probe import ProbeOutcome
from burnin.reference import GPU_MODELS, model_matches
from burnin.verdict import Verdict, majority


def fleet_summary(fleet: dict[str, ProbeOutcome]) -> dict[str, tuple[object, str, int]]:
    """Once per run: the majority driver and torch versions, as (value, why, nodes).

    value is None (and why says so) when no version leads outright.
    """
    out = {}
    for what, get in (("driver", _driver), ("torch", _torch_version)):
        values = {name: get(o) for name, o in fleet.items() if o.ok and get(o) is not None}
        common, why = majority(values)
        out[what] = (common, why, len(values))
    return out


def judge(node: Node, outcome: ProbeOutcome, summary: dict) -> Verdict:
    """Judge one node's health outcome against the run's fleet_summary()."""
    if not outcome.ok:
        return Verdict(node.name, "health", (outcome.reason,))
    failures: list[str] = []
    warnings: list[str] = []
    data = outcome.data
    figures = data["figures"]
    torch = figures.get("torch") or {}
    gpu = figures.get("gpu") or {}
    devices = data["devices"]

    failures += [f"probe error: {e}" for e in data["errors"]]
    if not torch.get("present"):
        failures.append(f"torch is not importable on the node: {torch.get('error', 'absent')}")

    if gpu.get("nvml") != "present":
        if node.gpus:
            failures.append(f"inventory says {node.gpus} GPUs, but NVML is absent on the node "
                            f"({gpu.get('reason', 'no reason given')})")
    else:
        if node.gpus is not None and len(devices) != node.gpus:
            failures.append(f"GPU count is {len(devices)}, inventory says {node.gpus}")
        for dev in devices:
            failures += _device_faults(node, dev)
            if dev.get("ecc_uncorrected_aggregate"):
                warnings.append(f"{_gpu(dev)}: {dev['ecc_uncorrected_aggregate']} uncorrectable "
                                "ECC errors over its lifetime (aggregate counter)")

    failures += _odd_one_out(_driver(outcome), "driver", summary["driver"])
    failures += _odd_one_out(_torch_version(outcome), "torch", summary["torch"])
    return Verdict(node.name, "health", tuple(failures), tuple(warnings))


def _gpu(dev: dict) -> str:
    return f"GPU {dev.get('index')} ({dev.get('uuid') or 'no UUID'})"


def _device_faults(node: Node, dev: dict) -> list[str]:
    gpu = _gpu(dev)
    out = []
    if dev.get("errors"):
        # A lost GPU fails every reading: one line per cause, listing the readings.
        by_cause: dict[str, list[str]] = {}
        for e in dev["errors"]:
            what, _, cause = e.partition(": ")
            by_cause.setdefault(cause, []).append(what)
        out += [f"{gpu}: NVML error ({cause}) reading {', '.join(whats)}"
                for cause, whats in by_cause.items()]
    name = dev.get("name")
    if node.gpu_model and name is not None and not model_matches(node.gpu_model, name):
        expected = " or ".join(repr(n) for n in GPU_MODELS[node.gpu_model].nvml_names)
        out.append(f"{gpu}: model is {name!r}, inventory says {node.gpu_model} ({expected})")
    if dev.get("ecc_mode_current") == 0:
        pending = " (enabled, pending a reset)" if dev.get("ecc_mode_pending") == 1 else ""
        out.append(f"{gpu}: ECC is off{pending}, expected on")
    unc = dev.get("ecc_uncorrected_volatile")
    if unc:
        out.append(f"{gpu}: {unc} uncorrectable ECC errors since the driver loaded, expected 0")
    rows = dev.get("remapped_rows") or {}
    if rows.get("pending"):
        out.append(f"{gpu}: row remap pending (a reset is needed), expected none")
    if rows.get("failed"):
        out.append(f"{gpu}: row remap failed, expected none (the GPU needs service)")
    if dev.get("retired_pages_pending"):
        out.append(f"{gpu}: retired pages pending, expected none")
    pcie = dev.get("pcie") or {}
    if pcie.get("width") is not None and pcie.get("max_width") is not None:
        if pcie["width"] < pcie["max_width"]:
            out.append(f"{gpu}: PCIe link width x{pcie['width']}, max x{pcie['max_width']}")
    gen = pcie.get("gen_under_load", pcie.get("gen"))
    if gen is not None and pcie.get("max_gen") is not None and gen < pcie["max_gen"]:
        how = "under load" if "gen_under_load" in pcie else "at rest"
        out.append(f"{gpu}: PCIe link gen {gen} {how}, max gen {pcie['max_gen']}")
    return out


def _driver(outcome: ProbeOutcome):
    gpu = outcome.data["figures"].get("gpu") or {}
    return gpu.get("driver") if gpu.get("nvml") == "present" else None


def _torch_version(outcome: ProbeOutcome):
    return (outcome.data["figures"].get("torch") or {}).get("version")


def _odd_one_out(mine, what: str, fleet: tuple[object, str, int]) -> list[str]:
    common, why, count = fleet
    if mine is None or count < 2:
        return []
    if common is None:
        return [f"{what} version {mine}: {why} among {count} nodes"]
    if mine != common:
        return [f"{what} version {mine}, the run's majority is {common}"]
    return []
