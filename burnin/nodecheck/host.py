"""Host: CPUs and memory against the inventory's health settings (or, where they declare
none, the node's own last good node-check), EDAC memory error counts (the health check's
rules: burnin/checks/host.py), and the root and workdir file systems not full."""

from __future__ import annotations

import os

from burnin.checks.host import GIB, host_rules
from burnin.model.nodes import Node
from burnin.nodecheck.model import CheckResult, fail, warn
from burnin.nodecheck.probelink import hostfacts

CHECK = "host"


def check(node: Node, settings: dict, workdir: str, last_good: dict,
          min_free_gib: float) -> CheckResult:
    """`settings`: the node's health check settings; `last_good`: {cpus, memory_bytes} of
    the last node-check that found nothing (empty on the first)."""
    hf = hostfacts()
    proc_root = str(settings.get("proc_root") or "/proc")
    facts = {"cpus": hf._cpus(proc_root), **hf.meminfo(proc_root),
             "edac": hf.edac(str(settings.get("sysfs_root") or "/sys"))}
    failures, warnings = host_rules(node, facts, settings, {}, "")
    findings = [fail(CHECK, t) for t in failures] + [warn(CHECK, t) for t in warnings]
    findings += _against_last_good(facts, settings, last_good)
    for what, where in (("root", "/"), ("workdir", _existing(workdir))):
        findings += _free(what, where, min_free_gib)
    return CheckResult(CHECK, tuple(findings),
                       state={"cpus": facts["cpus"], "memory_bytes": facts["memory_bytes"]})


def _against_last_good(facts: dict, settings: dict, last: dict) -> list:
    """A socket or DIMMs lost since the node was last clean, where no figure is declared."""
    out = []
    cpus, before = facts.get("cpus"), last.get("cpus")
    if settings.get("cpus") is None and cpus is not None and before and cpus < before:
        out.append(fail(CHECK, f"{cpus} CPUs, {before} at the last clean node-check"))
    mem, before = facts.get("memory_bytes"), last.get("memory_bytes")
    tolerance = settings.get("memory_tolerance", 0.05)
    if settings.get("memory_gib") is None and mem and before \
            and mem < before * (1 - tolerance):
        out.append(fail(CHECK, f"memory {mem / GIB:.1f} GiB, {before / GIB:.1f} GiB at the "
                               f"last clean node-check (within {tolerance:.0%})"))
    return out


def _existing(path: str) -> str:
    """`path`, or its nearest existing parent: a run makes the workdir on first use, and
    the file system it will be on is the one to keep free."""
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _free(what: str, where: str, min_free_gib: float) -> list:
    try:
        st = os.statvfs(where)
    except OSError as e:
        return [fail(CHECK, f"{what} file system ({where}) cannot be read: "
                            f"{e.strerror or e}")]
    free = st.f_bavail * st.f_frsize
    if free < min_free_gib * GIB:
        return [fail(CHECK, f"{what} file system ({where}) has {free / GIB:.2f} GiB free, "
                            f"below {min_free_gib:g} GiB (node_check.min_free_gib)")]
    if st.f_files and st.f_favail == 0:
        return [fail(CHECK, f"{what} file system ({where}) has no free inodes")]
    return []
