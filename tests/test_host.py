"""The health check's host rules: the real health probe reading a planted kernel log (XIDs
since boot, as kmsg records and as dmesg lines), EDAC counters, cpuinfo and meminfo from
fake trees, with emulated GPUs; each rule fails with the GPU, controller or setting named,
and a clean node passes. Fleet majorities are judged with each node one vote."""

from __future__ import annotations

import copy
from pathlib import Path

from burnin.checks import Fleet, Judging, resolve_settings
from burnin.checks.health import fleet_summary, judge
from burnin.model.gpu_reference import GPU_MODELS
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
MODEL = "H100-SXM5-80GB"
GIB = 1 << 30

KERNEL_LOG = [
    # The boot's first record (sequence 0): this log runs from boot.
    "6,0,0,-;Linux version 6.8.0-45-generic",
    "6,1000,2000000,-;nvidia-nvlink: Nvlink Core is being initialized",
    # GPU 1 (00000000:28:00.0) fell off the bus: a kmsg record, microseconds since boot.
    "3,1001,5000000,-;NVRM: Xid (PCI:0000:28:00): 79, pid=1234, name=python3, GPU has "
    "fallen off the bus.",
    "3,1002,5100000,-;NVRM: Xid (PCI:0000:28:00): 79, pid=1234, name=python3, GPU has "
    "fallen off the bus.",
    # GPU 0: an application's page fault (dmesg text): a warning, not a fault of the GPU.
    "[ 6000.500000] NVRM: Xid (PCI:0000:18:00): 31, pid=55, name=train, Ch 00000008, "
    "intr 00000000. MMU Fault",
    # An address no GPU of the node has now: it was there when it logged.
    "[ 7000.000000] NVRM: Xid (PCI:0000:99:00.0): 48, pid=1, DBE (double bit error)",
]


def tree(root: Path, cpus: int = 4, mem_gib: float = 16, swap_gib: float = 0,
         edac: dict | None = None, log: list[str] | None = None) -> dict:
    """Fake /proc and /sys trees and a kernel log file; the health settings reading them."""
    proc, sys_ = root / "proc", root / "sys"
    proc.mkdir(parents=True)
    (proc / "cpuinfo").write_text("".join(f"processor\t: {i}\nmodel name\t: EPYC\n\n"
                                          for i in range(cpus)))
    (proc / "meminfo").write_text(f"MemTotal:       {int(mem_gib * (1 << 20))} kB\n"
                                  f"MemFree:        1024 kB\n"
                                  f"SwapTotal:      {int(swap_gib * (1 << 20))} kB\n")
    for mc, (ce, ue) in (edac or {}).items():
        d = sys_ / "devices" / "system" / "edac" / "mc" / mc
        d.mkdir(parents=True)
        (d / "ce_count").write_text(f"{ce}\n")
        (d / "ue_count").write_text(f"{ue}\n")
    (root / "kmsg").write_text("\n".join(log or []) + "\n")
    return {"proc_root": str(proc), "sysfs_root": str(sys_), "kernel_log": str(root / "kmsg")}


def node(name: str = "n1", gpus: int = 2) -> Node:
    return Node(name=name, address=name, transport="local", gpus=gpus, gpu_model=MODEL)


def probe(n: Node, settings: dict) -> ProbeOutcome:
    out = run_probe(LocalTransport(n, REPO / "probes"), "health", {"settings": settings},
                    timeout_s=300)
    assert out.ok, out.reason
    return out


def judged(outcomes: dict[str, ProbeOutcome], name: str, gpus: int = 2, **settings):
    model = GPU_MODELS[MODEL]
    summary = fleet_summary(Fleet(outcomes, models=dict.fromkeys(outcomes, model)))
    return judge(node(name, gpus), outcomes[name],
                 Judging({**resolve_settings("health", "standard", {}), **settings}, summary,
                         model, gpus))


def test_xids_since_boot_edac_and_declared_host_fail_with_what_they_name(nvml, tmp_path):
    nvml(devices=[{}, {}])  # PCI 00000000:18:00.0 and 00000000:28:00.0
    bad = tree(tmp_path / "bad", cpus=3, mem_gib=15.5, swap_gib=2,
               edac={"mc0": (5, 0), "mc1": (500, 2)}, log=KERNEL_LOG)
    out = probe(node(), bad)
    host = out.data["figures"]["host"]
    assert (host["cpus"], host["memory_bytes"], host["swap_bytes"]) == (3, 15.5 * GIB, 2 * GIB)
    log = host["kernel_log"]
    assert log["readable"] and len(log["xids"]) == 4 and log["sxids"] == []
    assert (log["records"], log["oldest_s"], log["newest_s"], log["first_seq"]) == (6, 0, 7000, 0)
    v = judged({"n1": out}, "n1", cpus=4, memory_gib=16, swap_gib=0)
    uuid1 = out.data["devices"][1]["uuid"]
    assert sorted(v.failures) == sorted([
        f"GPU 1 ({uuid1}): XID 79 (GPU has fallen off the bus) in the kernel log since boot, "
        f"2 times, last at 5 s after boot: 'pid=1234, name=python3, GPU has fallen off the "
        f"bus.'; NVIDIA's immediate action: RESTART_BM",
        "PCI 0000:99:00 (no GPU of this node there now): XID 48 (Double Bit ECC Error) in the "
        "kernel log since boot, last at 7000 s after boot: 'pid=1, DBE (double bit error)'; "
        "NVIDIA's immediate action: WORKFLOW_XID_48",
        "3 CPUs, the settings declare 4",
        "swap 2.0 GiB, the settings declare 0 GiB",
        "EDAC mc1: 2 uncorrected memory errors since boot",
        "EDAC mc1: 500 corrected memory errors since boot, more than 100 (max_edac_corrected)",
    ]), v.failures
    uuid0 = out.data["devices"][0]["uuid"]
    assert sorted(v.warnings) == sorted([
        f"GPU 0 ({uuid0}): XID 31 (GPU memory page fault) in the kernel log since boot, last "
        f"at 6000 s after boot: 'pid=55, name=train, Ch 00000008, intr 00000000. MMU Fault'; "
        f"NVIDIA's immediate action: RESTART_APP",
        "EDAC mc0: 5 corrected memory errors since boot"]), v.warnings
    # 15.5 GiB is within 5% of 16 GiB (MemTotal leaves out what firmware keeps); of 17 not.
    assert not any(f.startswith("memory") for f in v.failures)
    assert "memory 15.5 GiB, the settings declare 17 GiB (within 5%)" in judged(
        {"n1": out}, "n1", memory_gib=17).failures

    clean = probe(node(), tree(tmp_path / "clean", log=KERNEL_LOG[:2]))
    assert judged({"n1": clean}, "n1", cpus=4, memory_gib=16, swap_gib=0).passed


def test_a_kernel_log_that_cannot_be_read_fails_a_gpu_node_unless_turned_off(nvml, tmp_path):
    nvml(devices=[{}, {}])
    settings = tree(tmp_path / "t")
    gone = probe(node(), {**settings, "kernel_log": str(tmp_path / "no-such-log")})
    failures = judged({"n1": gone}, "n1").failures
    assert len(failures) == 1 and failures[0].startswith(
        "kernel log unreadable as uid 0 (root), so XIDs and NVSwitch SXids since boot cannot "
        "be checked (")
    assert "No such file or directory): give that account the right" in failures[0]
    assert "set checks.health.kernel_log: off" in failures[0]
    off = probe(node(), {**settings, "kernel_log": "off"})
    v = judged({"n1": off}, "n1")
    assert v.passed and v.warnings == (
        "kernel log not read (checks.health.kernel_log: off): XIDs and NVSwitch SXids since "
        "boot not checked, so a GPU or NVSwitch that logged a fault since boot (fallen off the "
        "bus, a double-bit ECC error, an NVLink error) passes health; burn still fails any XID "
        "NVML reports during its own load",)
    # A CPU-only node has no XIDs to miss.
    cpu = copy.deepcopy(gone)
    cpu.data["devices"], cpu.data["figures"]["gpu"] = [], {"nvml": "absent", "reason": "none"}
    assert judged({"n1": cpu}, "n1", gpus=0).passed


def test_the_host_is_judged_against_most_nodes_of_its_model(nvml, tmp_path):
    """Without declared values: each node one vote, the odd one out fails alone."""
    nvml(devices=[{}, {}])
    base = probe(node(), tree(tmp_path / "t", cpus=4, mem_gib=1024))
    outcomes = {}
    for name, cpus, mem in (("a", 4, 1024), ("b", 4, 1024), ("c", 4, 1024),
                            ("lost-dimm", 4, 960), ("lost-socket", 2, 1024)):
        o = copy.deepcopy(base)
        o.data["figures"]["host"].update(cpus=cpus, memory_bytes=mem * GIB - 300 * (1 << 20))
        outcomes[name] = o
    verdicts = {n: judged(outcomes, n) for n in outcomes}
    assert [n for n, v in verdicts.items() if not v.passed] == ["lost-dimm", "lost-socket"]
    assert verdicts["lost-dimm"].failures == (
        "memory 959.7 GiB, most of the run's 5 nodes of this model have 1024 GiB",)
    assert verdicts["lost-socket"].failures == (
        "2 CPUs, most of the run's 5 nodes of this model have 4",)
