"""Helpers for the fast tier's judge tests: a node's outcome and the judging around it,
built from plain dicts (no probe runs)."""

from __future__ import annotations

from burnin.checks import CHECKS, Fleet, Judging
from burnin.model.gpu_reference import GpuModel
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome

H100 = GpuModel("H100", ("NVIDIA H100 80GB HBM3",), peak_tflops=1000.0, burn_tflops=600.0,
                allreduce_intra_gbps=400.0, allreduce_ranks=8, pcie_gbps=50.0,
                nvlink_links=18)


def doc(check: str, devices: list, figures: dict | None = None, errors=()) -> dict:
    return {"probe": CHECKS[check].probe_name, "schema": 1, "node": {}, "devices": devices,
            "figures": figures or {}, "errors": list(errors)}


def outcome(check: str, devices: list, figures: dict | None = None, errors=(),
            node: str = "n1") -> ProbeOutcome:
    return ProbeOutcome(node, check, True, data=doc(check, devices, figures, errors))


def failed(check: str, reason: str, node: str = "n1") -> ProbeOutcome:
    return ProbeOutcome(node, check, False, reason)


def judge(check: str, o: ProbeOutcome, node: Node | None = None, **judging):
    """The check's verdict on `o`, as (failures, warnings): with the quick profile's
    settings, updated by `settings={...}`, less those named in `drop=(...)` (so that the
    judge's own default for a setting is what is tested)."""
    spec = CHECKS[check]
    drop = judging.pop("drop", ())
    settings = {k: v for k, v in {**spec.resolve("quick"), **judging.pop("settings", {})}.items()
                if k not in drop}
    v = spec.judge(node or Node(o.node, o.node), o, Judging(settings=settings, **judging))
    assert (v.node, v.check) == (o.node, check)
    return v.failures, v.warnings


def summary(check: str, outcomes: dict, devices: dict | None = None,
            models: dict | None = None):
    return CHECKS[check].summarize(Fleet(outcomes, devices or {}, models or {}))
