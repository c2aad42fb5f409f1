"""GPUs through NVML, at rest: count against the inventory (or the last clean check), a
GPU lost or fallen off the bus, and per GPU the health check's own rules
(burnin/checks/health.py, drift.py, host.py): model, ECC mode, uncorrectable errors since
the driver loaded, row remap pending or failed, retired pages pending, persistence and MIG
mode, clocks held by a setting; the GPU's NVLink fabric registration and the node's IMEX
channels, read by the health probe's own reader (probes/gpufabric.py) and judged by its
rule (burnin/checks/gpu_fabric.py); and what node-check adds: clocks slowed right now by
the hardware (slowdown, thermal, power brake).

Not read here, because a job may be running on the GPUs while node-check runs: compute
processes, the PCIe link generation (it trains down at rest and is re-read under load by
the health check), the power limit. NVML is read in a child process (gpuread.py) that is
killed at the deadline, as the storage check's is: node-check itself never calls the
driver, so a call stuck in the kernel cannot hold slurmd past the budget.
"""

from __future__ import annotations

import json
import subprocess
import sys

from burnin.checks.drift import device_drift
from burnin.checks.gpu_fabric import (
    agreement_faults,
    fabric_faults,
    fabric_required,
    imex_faults,
    imex_required,
)
from burnin.checks.health import _device_faults, _gpu
from burnin.checks.host import clock_rules
from burnin.model.gpu_reference import GpuModel
from burnin.model.nodes import Node
from burnin.nodecheck import budget
from burnin.nodecheck.budget import KILL_MARGIN_S, remaining
from burnin.nodecheck.model import CheckResult, fail

CHECK = "gpu"
# nvml.h nvmlClocksEventReason*: the hardware slowing the clocks (not the application,
# not idling, not a power cap the operator set).
SLOWDOWNS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown",
             0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}
MAX_OUTPUT = 4 * 1024 * 1024  # a document of 64 GPUs' readings is well under this


def check(node: Node, model: GpuModel | None, settings: dict, last_good: dict,
          deadline: float) -> CheckResult:
    """`settings`: the node's health check settings; `last_good`: {gpus} of the last clean
    node-check (the count to hold a `gpus: auto` node to). NVML is read in a child process
    (burnin/nodecheck/gpuread.py) killed at `deadline`: a driver call stuck in the kernel
    holds the child, never node-check."""
    dev_root = str(settings.get("dev_root") or "/dev")
    try:
        # cwd /: `-m` puts the working directory first on the module path, and the one
        # slurmd or a person started node-check in may be another user's
        proc = subprocess.Popen([sys.executable, "-m", "burnin.nodecheck.gpuread", dev_root],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, cwd="/")
    except OSError as e:
        return CheckResult(CHECK, (fail(CHECK, f"could not start its NVML reader: {e}"),))
    with budget.child(proc):
        try:
            out, err = proc.communicate(timeout=remaining(deadline - KILL_MARGIN_S))
        except subprocess.TimeoutExpired:
            proc.kill()  # a child blocked in the driver dies when the call returns: not waited
            return CheckResult(CHECK, (fail(CHECK, "NVML did not answer within the time budget "
                                                   "(a driver call hung?)"),), finished=False)
    try:
        if len(out) > MAX_OUTPUT:
            raise ValueError("too long")
        found = json.loads(out)
        if not isinstance(found, dict) or not isinstance(found.get("init"), str):
            raise ValueError("not a readings document")
    except ValueError:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return CheckResult(CHECK, (fail(CHECK, f"its NVML reader exited {proc.returncode} "
                                               f"without readings: {tail[0][:200]}"),))
    return judge(node, model, settings, last_good, found)


def judge(node: Node, model: GpuModel | None, settings: dict, last_good: dict,
          found: dict) -> CheckResult:
    """The findings of the readings gpuread.readings() took."""
    if found["init"]:
        return _absent(node, found["init"])
    try:
        return _judge(node, model, settings, last_good, found)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return CheckResult(CHECK, (fail(CHECK, f"its NVML readings cannot be judged: "
                                               f"{type(e).__name__}: {e}"),))


def _absent(node: Node, why: str) -> CheckResult:
    if node.gpus:
        return CheckResult(CHECK, (fail(CHECK, f"inventory says {node.gpus} GPUs, but NVML is "
                                               f"absent on the node ({why})"),))
    if node.gpus is None and node.gpu_model:
        return CheckResult(CHECK, (fail(CHECK, f"inventory says gpu_model {node.gpu_model} "
                                               f"(gpus: auto), but NVML is absent on the node "
                                               f"({why})"),))
    return CheckResult(CHECK, state={"gpus": 0})


def _judge(node: Node, model, settings: dict, last_good: dict, found: dict) -> CheckResult:
    if found.get("count_error"):
        return CheckResult(CHECK, (fail(CHECK, found["count_error"]),))
    findings = []
    count = found["count"]
    want, source = node.gpus, "inventory says"
    if want is None and last_good.get("gpus"):
        want, source = last_good["gpus"], "the last clean node-check saw"
    if want is not None and count != want:
        findings.append(fail(CHECK, f"GPU count is {count}, {source} {want}"))
    # As the run's health check: a node of a declared NVLink domain fails without a
    # fabric; any GPU whose fabric NVML reports is judged on any model.
    in_fabric = fabric_required(node, model)
    for dev in found["devices"]:
        name = _gpu(dev)
        lost = [e for e in dev["errors"] if "GPU is lost" in e or "GPU_IS_LOST" in e]
        if lost:
            findings.append(fail(CHECK, f"{name}: lost (NVML: GPU is lost): fallen off the "
                                        f"bus or hung; XID 79 territory, the node needs a "
                                        f"reset"))
            continue
        for text in (_device_faults(node, dev, model)
                     + fabric_faults(name, dev.get("fabric"), in_fabric)
                     + device_drift(name, dev, node, settings)
                     + clock_rules(name, dev, settings) + _slowdowns(name, dev)):
            findings.append(fail(CHECK, text))
    for text in (imex_faults(found["imex"], imex_required(node, model))
                 + agreement_faults(found["devices"], _gpu)):
        findings.append(fail(CHECK, text))
    return CheckResult(CHECK, tuple(findings), state={"gpus": count})


def _slowdowns(name: str, dev: dict) -> list[str]:
    reasons = dev.get("clock_event_reasons")
    if not reasons:
        return []
    active = [what for bit, what in SLOWDOWNS.items() if reasons & bit]
    return [f"{name}: clocks slowed by {', '.join(active)} (clock event reasons "
            f"{reasons:#x}), expected none"] if active else []
