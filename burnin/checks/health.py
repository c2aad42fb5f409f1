"""The health check's judge: is the node what the inventory says, and are its GPUs sound?

Fails the node when: the probe failed; torch is missing; the GPU count or model differs
from the inventory (with `gpus: auto`, the count differs from most nodes of its model);
torch sees fewer GPUs than the node should have (a driver/CUDA mismatch, hidden devices:
the node would otherwise be measured on its CPU; a GPU with MIG on is named as such, "MIG
is on for GPU n", and a MIG device is not counted as a GPU); ECC is off; any uncorrectable ECC
error since the driver loaded; a row remap is pending or has failed; retired pages are
pending; a PCIe link is below its max width or generation (generation read under load);
the driver or torch version differs from the majority of the run's nodes; the GPU's
configuration has drifted (burnin/checks/drift.py: persistence, MIG and compute modes,
foreign processes, power limit, versions the inventory's `expect:` pins); an XID is in
the kernel log since boot, a GPU runs application or locked clocks not declared, or the
host differs (burnin/checks/host.py: CPU count, memory, swap, EDAC memory errors); a
GPU's NVLink fabric registration is not completed or its health says degraded, the
node's declared NVLink domain needs a fabric or IMEX channels it lacks, or its GPUs (or
the domain's nodes) disagree on cluster and clique (burnin/checks/gpu_fabric.py).
"""

from __future__ import annotations

from burnin.checks.base import (
    DEVICE_COUNT,
    ECC,
    PEERS,
    XID,
    Check,
    Fleet,
    Judging,
    Kind,
    Setting,
    timeout,
)
from burnin.checks.drift import COMPUTE_MODES, device_drift, pinned_versions
from burnin.checks.fabric import SNAPSHOT
from burnin.checks.gpu_fabric import (
    agreement_faults,
    domain_faults,
    domain_summary,
    fabric_faults,
    fabric_required,
    imex_faults,
    imex_required,
    imex_warnings,
)
from burnin.checks.host import GIB, clock_rules, host_rules, kernel_log_rules
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict, majority
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

# --- what the run learns from a node's health document (its facts), before other checks ---

def facts_gpus(outcome: ProbeOutcome) -> int | None:
    """The GPUs the node's health facts show (NVML's count, else torch's); None when its
    health probe failed: then nothing is assumed."""
    if not outcome.ok:
        return None
    gpu = outcome.data["figures"].get("gpu") or {}
    if gpu.get("nvml") == "present":
        return len(outcome.data["devices"])
    return (outcome.data["figures"].get("torch") or {}).get("device_count") or 0


def facts_equipped(outcome: ProbeOutcome | None) -> frozenset[str] | None:
    """The checks whose tool the node's facts found (dcgm where dcgmi is installed); None
    while unknown (its health probe failed, or did not run on it)."""
    if outcome is None or not outcome.ok:
        return None
    tools = outcome.data["figures"].get("tools") or {}
    return frozenset(check for check, t in tools.items() if t.get("path"))


def facts_baseline(outcome: ProbeOutcome | None, check: str) -> dict | None:
    """What the node's health probe read before the load for `check` (Check.baseline)."""
    if outcome is None or not outcome.ok:
        return None
    return (outcome.data["figures"].get("baselines") or {}).get(check)


def fleet_summary(fleet: Fleet) -> dict:
    """Once per run: the majority driver and torch versions, as (value, why, nodes), and
    per GPU model the majority GPU count; each node one vote.

    value is None (and why says so) when no value leads outright.
    """
    out: dict[str, object] = {}
    for what, get in (("driver", _driver), ("torch", _torch_version)):
        values = {name: get(o) for name, o in fleet.outcomes.items()
                  if o.ok and get(o) is not None}
        common, why = majority(values)
        out[what] = (common, why, len(values))
    counts: dict[str, dict[str, int]] = {}
    for name, o in fleet.outcomes.items():
        if o.ok and _nvml(o):
            model = fleet.models.get(name)
            counts.setdefault(model.key if model else "", {})[name] = len(o.data["devices"])
    out["gpus"] = {key: (*majority(values), len(values)) for key, values in counts.items()}
    hosts: dict[str, dict[str, dict[str, int]]] = {"cpus": {}, "memory_gib": {}}
    for name, o in fleet.outcomes.items():
        host = (o.data["figures"].get("host") or {}) if o.ok else {}
        model = fleet.models.get(name)
        key = model.key if model else ""
        if host.get("cpus") is not None:
            hosts["cpus"].setdefault(key, {})[name] = host["cpus"]
        if host.get("memory_bytes") is not None:
            hosts["memory_gib"].setdefault(key, {})[name] = round(host["memory_bytes"] / GIB)
    for what, per_model in hosts.items():  # (majority value or None, nodes)
        out[what] = {key: (majority(values)[0], len(values))
                     for key, values in per_model.items()}
    out["nvlink_domains"] = domain_summary(dict(fleet.voters()), fleet.nodes)
    return out


def _nvml(outcome: ProbeOutcome) -> bool:
    return (outcome.data["figures"].get("gpu") or {}).get("nvml") == "present"


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    """Judge one node's health outcome against the run's fleet_summary()."""
    summary = j.fleet
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
        elif node.gpus is None and node.gpu_model:
            # gpus: auto counts what NVML sees; a node of a GPU model where NVML sees
            # nothing would otherwise count as a CPU node and pass on its CPU.
            failures.append(f"inventory says gpu_model {node.gpu_model} (gpus: auto), but "
                            f"NVML is absent on the node "
                            f"({gpu.get('reason', 'no reason given')})")
    else:
        if node.gpus is not None and len(devices) != node.gpus:
            failures.append(DEVICE_COUNT(f"GPU count is {len(devices)}, inventory says "
                                         f"{node.gpus}"))
        elif node.gpus is None:
            failures += _count_against_peers(len(devices), j)
        in_fabric = fabric_required(node, j.model)
        for dev in devices:
            failures += _device_faults(node, dev, j.model)
            failures += fabric_faults(_gpu(dev), dev.get("fabric"), in_fabric)
            failures += device_drift(_gpu(dev), dev, node, j.settings)
            failures += clock_rules(_gpu(dev), dev, j.settings)
            if dev.get("ecc_uncorrected_aggregate"):
                warnings.append(f"{_gpu(dev)}: {dev['ecc_uncorrected_aggregate']} uncorrectable "
                                "ECC errors over its lifetime (aggregate counter)")

        imex = imex_required(node, j.model)
        failures += imex_faults(gpu.get("imex"), imex)
        warnings += imex_warnings(gpu.get("imex"), node, imex)
        failures += agreement_faults(devices, _gpu)
        failures += domain_faults(node, devices, summary.get("nvlink_domains"))
        failures += pinned_versions(node, gpu.get("driver"), gpu.get("cuda_driver"))
    host = figures.get("host") or {}
    gpu_node = bool(node.gpus) or bool(devices)
    more = kernel_log_rules(devices, host.get("kernel_log") or {}, gpu_node, _gpu)
    more2 = host_rules(node, host, j.settings, summary, j.model.key if j.model else "")
    failures += more[0] + more2[0]
    warnings += more[1] + more2[1]
    failures += _torch_sees_too_few(node, outcome)
    failures += _odd_one_out(_driver(outcome), "driver", summary["driver"])
    failures += _odd_one_out(_torch_version(outcome), "torch", summary["torch"])
    return Verdict(node.name, "health", tuple(failures), tuple(warnings))


def _count_against_peers(count: int, j: Judging) -> list[str]:
    common, why, nodes = j.fleet["gpus"].get(j.model.key if j.model else "", (None, "", 0))
    if nodes < 2:
        return []
    if common is None:  # two that disagree: neither is the odd one out
        return [f"GPU count {count}: {why} among {nodes} nodes of this model"] \
            if nodes >= PEERS else []
    if count != common:
        return [DEVICE_COUNT(f"GPU count is {count}, most of the run's {nodes} nodes of this "
                             f"model have {common}")]
    return []


def _torch_sees_too_few(node: Node, outcome: ProbeOutcome) -> list[str]:
    """A node that should have GPUs (the inventory says so, or NVML sees them) where torch
    sees fewer: every GPU check would fail on it, or worse, run on its CPU."""
    figures = outcome.data["figures"]
    torch = figures.get("torch") or {}
    if not torch.get("present"):
        return []
    nvml = len(outcome.data["devices"]) if _nvml(outcome) else 0
    should = node.gpus if node.gpus is not None else nvml
    seen = torch.get("device_count", 0)
    if "devices" in torch:  # a MIG device (UUID MIG-...) is a slice of a GPU, not a GPU
        seen = sum(not str(d.get("uuid") or "").startswith("MIG-") for d in torch["devices"])
    # CUDA cannot use a GPU with MIG on as a whole: its own rule names it (MIG is on for
    # GPU n); only GPUs missing beyond those are torch's to explain.
    mig = sum(1 for d in outcome.data["devices"] if d.get("mig_mode_current") == 1) \
        if _nvml(outcome) else 0
    if not should or seen + mig >= should:
        return []
    who = "the inventory declares" if node.gpus is not None else "NVML reports"
    why = f": {torch['cuda_error']}" if torch.get("cuda_error") else ""
    with_mig = f" ({mig} with MIG on)" if mig else ""
    return [DEVICE_COUNT(f"torch sees {seen} of the {should} GPUs {who}{with_mig}{why}")]


def _gpu(dev: dict) -> str:
    return f"GPU {dev.get('index')} ({dev.get('uuid') or 'no UUID'})"


def _device_faults(node: Node, dev: dict, model) -> list[str]:
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
    if model and name is not None and not model.matches(name):
        expected = " or ".join(repr(n) for n in model.nvml_names)
        out.append(f"{gpu}: model is {name!r}, inventory says {node.gpu_model} ({expected})")
    if dev.get("ecc_mode_current") == 0:
        pending = " (enabled, pending a reset)" if dev.get("ecc_mode_pending") == 1 else ""
        out.append(f"{gpu}: ECC is off{pending}, expected on")
    unc = dev.get("ecc_uncorrected_volatile")
    if unc:
        out.append(ECC(f"{gpu}: {unc} uncorrectable ECC errors since the driver loaded, "
                       "expected 0"))
    rows = dev.get("remapped_rows") or {}
    if rows.get("pending"):
        out.append(ECC(f"{gpu}: row remap pending (a reset is needed), expected none"))
    if rows.get("failed"):
        out.append(ECC(f"{gpu}: row remap failed, expected none (the GPU needs service)"))
    if dev.get("retired_pages_pending"):
        out.append(ECC(f"{gpu}: retired pages pending, expected none"))
    pcie = dev.get("pcie") or {}
    if pcie.get("width") is not None and pcie.get("max_width") is not None:
        if pcie["width"] < pcie["max_width"]:
            out.append(f"{gpu}: PCIe link width x{pcie['width']}, max x{pcie['max_width']}")
    gen = pcie.get("gen_under_load", pcie.get("gen"))
    if gen is not None and pcie.get("max_gen") is not None and gen < pcie["max_gen"]:
        how = "under load" if "gen_under_load" in pcie else "at rest"
        out.append(f"{gpu}: PCIe link gen {gen} {how}, max gen {pcie['max_gen']}")
    # NVML's max is what the GPU and its slot allow: a Gen4 card in a Gen3 slot says 3.
    for what, key in (("gen", "pcie_gen"), ("width", "pcie_width")):
        want, best = getattr(model, key, None) if model else None, pcie.get(f"max_{what}")
        if want and best is not None and best < want:
            out.append(f"{gpu}: PCIe max link {what} {best} (the GPU and its slot), "
                       f"{model.key}'s datasheet gives {what} {want}")
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
    if common is None:  # two that disagree: neither is the odd one out
        return [f"{what} version {mine}: {why} among {count} nodes"] if count >= PEERS else []
    if mine != common:
        return [f"{what} version {mine}, the run's majority is {common}"]
    return []


PCIE = Obj(gen=Int(null=True), max_gen=Int(null=True), width=Int(null=True),
           max_width=Int(null=True), gen_under_load=Int(null=True))
FABRIC = Obj(api=Str(64), version=Int(0, 255, null=True), state=Str(64),
             status=Int(-(2**31), 2**32), clique_id=COUNT, cluster_uuid=Str(64),
             health_mask=NULL_COUNT,
             health=Obj(values=Str(64), max_keys=16), summary=Str(64), null=True)
DEVICE = Obj(index=Int(0, 1023), name=Str(256, null=True), uuid=Str(256, null=True),
             pci_bus_id=Str(64, null=True), ecc_mode_current=Int(null=True),
             ecc_mode_pending=Int(null=True), ecc_uncorrected_volatile=NULL_COUNT,
             ecc_uncorrected_aggregate=NULL_COUNT, retired_pages_pending=Bool(null=True),
             ecc_corrected_aggregate=NULL_COUNT, retired_pages=NULL_COUNT,
             pcie_replay=NULL_COUNT, pcie_aer_correctable=NULL_COUNT,
             remapped_rows=Obj(correctable=COUNT, uncorrectable=COUNT, pending=Bool(),
                               failed=Bool()),
             pcie=PCIE, fabric=FABRIC, persistence_mode=Int(null=True), compute_mode=Int(null=True),
             mig_mode_current=Int(null=True), mig_mode_pending=Int(null=True),
             power_limit_mw=NULL_COUNT, power_default_limit_mw=NULL_COUNT,
             vbios=Str(256, null=True), inforom_image=Str(256, null=True),
             clocks=Obj(values=NULL_COUNT, max_keys=8), clock_event_reasons=NULL_COUNT,
             processes=List(Obj(pid=COUNT, used_memory=NULL_COUNT), max=4096),
             # which NVML function answered a reading that has an older or newer name
             api=Obj(values=Str(128), max_keys=32),
             unsupported=MESSAGES, errors=MESSAGES)
SCHEMA = document(DEVICE, Obj(
    torch=Obj(present=Bool(), version=Str(256), cuda=Str(64, null=True),
              cuda_available=Bool(), device_count=Int(0, 1024), error=Str(4096),
              cuda_error=Str(4096), devices=List(Obj(
                  ordinal=Int(0, 1024, null=True), uuid=Str(256, null=True),
                  name=Str(256), emulated=Bool()), max=64)),
    gpu=Obj(nvml=Str(64), driver=Str(256, null=True), cuda_driver=Str(64, null=True),
            reason=Str(4096),
            imex=Obj(path=Str(4096), present=Bool(), count=COUNT,
                     channels=List(Str(64), max=64), error=Str(4096, null=True))),
    tools=Obj(values=Obj(command=Str(4096), path=Str(4096, null=True))),
    baselines=Obj(fabric=SNAPSHOT, max_keys=8),
    host=Obj(cpus=Int(0, 1 << 20, null=True), memory_bytes=NULL_COUNT, swap_bytes=NULL_COUNT,
             edac=Obj(present=Bool(), controllers=Obj(values=Obj(ce=NULL_COUNT, ue=NULL_COUNT),
                                                      max_keys=256)),
             kernel_log=Obj(source=Str(4096), readable=Bool(), error=Str(4096, null=True),
                            user=Str(256), dropped=COUNT, records=COUNT,
                            oldest_s=Num(null=True), newest_s=Num(null=True),
                            first_seq=NULL_COUNT, overruns=COUNT, complete=Bool(),
                            uptime_s=Num(null=True),
                            xids=List(Obj(pci=Str(32), xid=COUNT, text=Str(1024),
                                          t=Num(null=True)), max=1000),
                            sxids=List(Obj(switch=Str(32), pci=Str(32), sxid=COUNT,
                                           text=Str(1024), t=Num(null=True)), max=1000))),
    elapsed_s=Scalar()))

def evidence(record: dict) -> dict[str, object]:
    data = record["data"]
    return {"facts.json": {
        "node": data.get("node"), "gpu": data["figures"].get("gpu"),
        "torch": data["figures"].get("torch"),
        "devices": [{k: d.get(k) for k in ("index", "name", "uuid", "pci_bus_id")}
                    for d in data.get("devices", [])]}}


COMPUTE_MODE = Kind(lambda v: v in COMPUTE_MODES.values(),
                    "one of: " + ", ".join(COMPUTE_MODES.values()))
# YAML reads an unquoted `off` as false: README's `kernel_log: off` must mean off.
KERNEL_LOG = Kind(lambda v: v is False or (isinstance(v, str) and v != ""),
                  "auto, off, or a file of kernel log lines")
CHECK = Check(
    name="health", page="burnin.report.summary.checks:health", page_order=0,
    doc="the node is what the inventory says", judge=judge, schema=SCHEMA,
    facts=True, failure_kinds=(DEVICE_COUNT, ECC, XID),
    settings={
        "timeout_s": timeout(60, 120, 300),
        "persistence_mode": Setting("bool", True, "every GPU in persistence mode"),
        "mig_mode": Setting("bool", False, "MIG mode every GPU must be in"),
        "compute_mode": Setting(COMPUTE_MODE, "default", "NVML compute mode of every GPU"),
        "power_limit_w": Setting("positive", None,
                                 "every GPU's power limit; default: the GPU's default limit"),
        "custom_clocks": Setting("bool", False, "application or locked GPU clocks are "
                                 "set on purpose (otherwise they fail)"),
        "kernel_log": Setting(KERNEL_LOG, "auto", "where XIDs and SXids since boot are "
                              "read: auto (/dev/kmsg, else journalctl -k), off, or a file"),
        "cpus": Setting("int", None, "logical CPUs; default: most nodes of the model"),
        "memory_gib": Setting("positive", None, "memory; default: most nodes of the model"),
        "memory_tolerance": Setting("fraction", 0.05, "how far MemTotal may be from it"),
        "swap_gib": Setting("nonnegative", None, "swap (0: none); default: not judged"),
        "max_edac_corrected": Setting("int", 100, "EDAC corrected errors since boot: "
                                      "warn above 0, fail above this"),
        "sysfs_root": Setting("str", "/sys", "where EDAC is read"),
        "proc_root": Setting("str", "/proc", "where cpuinfo and meminfo are read"),
        "dev_root": Setting("str", "/dev", "where the IMEX channel devices are looked for"),
    }, summarize=fleet_summary,
    evidence=evidence, max_output=1 << 20)
