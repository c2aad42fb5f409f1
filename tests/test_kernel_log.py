"""The kernel log as a real GPU node writes it, judged as NVIDIA means it: XIDs by the
Immediate Action of NVIDIA's Xid catalogue (XID 154 by the recovery action the driver
names), NVSwitch SXids, MIG-annotated XID lines, and the span of time a wrapped ring still
covers; and an ordinary account on a kernel with dmesg_restrict=1 running the whole suite,
as a Slurm job or a container would."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import nvmlemu
import pytest
from support.suiterun import NO_HYPOTHESIS
from test_host import judged, node, probe, tree

REPO = Path(__file__).resolve().parent.parent
BOOT = "6,0,0,-;Linux version 6.8.0-45-generic"  # kmsg's first record of a boot: sequence 0


def xid(pci: str, code: int, text: str, t: float = 100.0) -> str:
    return f"[{t:12.6f}] NVRM: Xid (PCI:{pci}): {code}, {text}"


def verdict(nvml, tmp_path, lines: list[str]):
    nvml(devices=[{}, {}])  # PCI 00000000:18:00.0 and 00000000:28:00.0
    out = probe(node(), tree(tmp_path / "t", log=[BOOT, *lines]))
    uuids = [d["uuid"] for d in out.data["devices"]]
    return judged({"n1": out}, "n1"), uuids, out.data["figures"]["host"]["kernel_log"]


def test_xid_11_and_136_to_154_are_judged_by_nvidias_immediate_action(nvml, tmp_path):
    """Main failed XID 11 (a bad push buffer: restart the application) as unknown and
    failed 137 (an application's illegal NVLink peer access, IGNORE) as unknown too."""
    v, (g0, g1), _ = verdict(nvml, tmp_path, [
        xid("0000:18:00", 11, "pid=7, name=train, Ch 00000010"),
        xid("0000:18:00", 137, "pid=7, NVLink: fault at 0x1000 on GPU 1"),
        xid("0000:28:00", 140, "pid='<unknown>', Unrecovered ECC Error 0x1"),
        xid("0000:28:00", 149, "NETIR_LINK_EVT Fatal XC0 i0 Link 04 (0x004505c6 0x00000000)"),
        xid("0000:28:00", 4242, "a code NVIDIA has not catalogued")])
    assert sorted(v.warnings) == [
        f"GPU 0 ({g0}): XID 11 (Invalid or corrupted push buffer stream) in the kernel log "
        f"since boot, last at 100 s after boot: 'pid=7, name=train, Ch 00000010'; NVIDIA's "
        f"immediate action: RESTART_APP",
        f"GPU 0 ({g0}): XID 137 (NVLink Privilege Error) in the kernel log since boot, last "
        f"at 100 s after boot: 'pid=7, NVLink: fault at 0x1000 on GPU 1'; NVIDIA's immediate "
        f"action: IGNORE"], v.warnings
    assert len(v.failures) == 3, v.failures
    assert f"GPU 1 ({g1}): XID 140 (ECC Unrecovered Error) in the kernel log" in v.failures[0]
    assert v.failures[0].endswith("NVIDIA's immediate action: RESET_GPU")
    assert "XID 149 (NVLINK: NETIR Error)" in v.failures[1]
    assert v.failures[1].endswith("NVIDIA's immediate action: WORKFLOW_NVLINK5_ERR")
    assert v.failures[2].startswith(f"GPU 1 ({g1}): XID 4242 (not in NVIDIA Xid catalogue)")
    assert v.failures[2].endswith("none known: not in the catalogue, so judged a fault")


def test_xid_154_fails_only_while_the_driver_asks_for_a_recovery(nvml, tmp_path):
    """The driver logs 154 each time a GPU's recovery action changes, back to None too
    (open-gpu-kernel-modules gpu.c); main failed the node on any 154."""
    changed = "GPU recovery action changed from {} to {}"
    v, (g0, g1), _ = verdict(nvml, tmp_path, [
        xid("0000:18:00", 154, changed.format("0x0 (None)", "0x1 (GPU Reset Required)"), 10),
        xid("0000:18:00", 154, changed.format("0x1 (GPU Reset Required)", "0x0 (None)"), 20),
        xid("0000:28:00", 154, changed.format("0x0 (None)", "0x2 (Node Reboot Required)"), 30)])
    assert v.warnings == (
        f"GPU 0 ({g0}): XID 154 (GPU Recovery Action Changed) in the kernel log since boot, 2 "
        f"times, last at 20 s after boot: 'GPU recovery action changed from 0x1 (GPU Reset "
        f"Required) to 0x0 (None)'; the driver's recovery action is back to None",), v.warnings
    assert v.failures == (
        f"GPU 1 ({g1}): XID 154 (GPU Recovery Action Changed) in the kernel log since boot, "
        f"last at 30 s after boot: 'GPU recovery action changed from 0x0 (None) to 0x2 (Node "
        f"Reboot Required)'; the driver asks for Node Reboot Required",), v.failures
    # A 154 whose text is not the driver's says nothing about the GPU being fine.
    garbled = verdict(nvml, tmp_path / "g", [xid("0000:18:00", 154, "GPU recovery action")])[0]
    assert garbled.failures[0].endswith("not the driver's format, so the recovery action it "
                                        "asks for is unknown"), garbled.failures


def test_an_xid_of_a_mig_instance_is_read(nvml, tmp_path):
    """With MIG on the driver writes "Xid (PCI:0000:28:00 GPU-I:05): 95" (its own comment
    in kern_gpu_error_cont_ga100.c): main's pattern did not match, and passed the GPU."""
    v, (_, g1), log = verdict(nvml, tmp_path, [
        "[  500.000000] NVRM: Xid (PCI:0000:28:00 GPU-I:05): 95, pid=7062, Uncontained: LTC "
        "TAG (0x2, 0x1). RST: Yes, D-RST: No"])
    assert [x["xid"] for x in log["xids"]] == [95]
    assert v.failures == (
        f"GPU 1 ({g1}): XID 95 (Uncontained memory error) in the kernel log since boot, last "
        f"at 500 s after boot: 'pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: "
        f"No'; NVIDIA's immediate action: RESET_GPU",)


def test_nvswitch_sxids_are_read_and_judged_fatal_or_not(nvml, tmp_path):
    """The nvidia-nvswitch driver's SXid lines (main ignored them): a corrected single-bit
    ECC error warns; a Fatal one, a Non-fatal one that stalls NVLink traffic and an
    unknown one fail."""
    sw = "[{t:12.6f}] nvidia-nvswitch{n}: SXid (PCI:0000:0{n}:00.0): {code}, {text}"
    v, _, log = verdict(nvml, tmp_path, [
        sw.format(t=40, n=5, code=11012, text="Non-fatal, Link 02 single bit ECC error"),
        sw.format(t=41, n=5, code=22013, text="Correctable, Link 07 Minion Link DLREQ"),
        sw.format(t=50, n=6, code=20034, text="Fatal, Link 30 LTSSM Fault Up"),
        sw.format(t=51, n=6, code=12028, text="Non-fatal, Link 32 egress non-posted PRIV "
                                              "error (First)"),
        sw.format(t=52, n=7, code=10002, text="Severity 5 Engine instance 00")])
    assert [(s["switch"], s["pci"], s["sxid"]) for s in log["sxids"]] == [
        ("nvswitch5", "0000:05:00.0", 11012), ("nvswitch5", "0000:05:00.0", 22013),
        ("nvswitch6", "0000:06:00.0", 20034), ("nvswitch6", "0000:06:00.0", 12028),
        ("nvswitch7", "0000:07:00.0", 10002)]
    assert v.warnings == (
        "NVSwitch nvswitch5 (PCI 0000:05:00.0): SXid 11012 (single-bit ECC error, corrected by "
        "the NVSwitch) in the kernel log since boot, last at 40 s after boot: 'Non-fatal, Link "
        "02 single bit ECC error'",
        "NVSwitch nvswitch5 (PCI 0000:05:00.0): SXid 22013 (Minion link DLREQ interrupt: safe "
        "to ignore) in the kernel log since boot, last at 41 s after boot: 'Correctable, Link "
        "07 Minion Link DLREQ'"), v.warnings
    assert [f.split(" in the kernel log")[0] for f in v.failures] == [
        "NVSwitch nvswitch6 (PCI 0000:06:00.0): SXid 20034 (not in burnin SXid table: judged "
        "by the driver words)",
        "NVSwitch nvswitch6 (PCI 0000:06:00.0): SXid 12028 (egress non-posted PRIV error: "
        "NVLink traffic stalls)",
        "NVSwitch nvswitch7 (PCI 0000:07:00.0): SXid 10002 (not in burnin SXid table: judged "
        "by the driver words)"], v.failures
    # The driver's own "Fatal" outranks a code burnin knows as benign.
    fatal = verdict(nvml, tmp_path / "f", [sw.format(t=9, n=5, code=11012, text="Fatal, x")])
    assert len(fatal[0].failures) == 1


def test_a_wrapped_ring_says_which_span_of_time_it_covered(nvml, tmp_path):
    """On a node up for months the kmsg ring holds the last days only: the verdict says
    from when the log ran (main said nothing, and "since boot" was not true)."""
    wrapped = [f"6,{5000 + i},{812345_000000 + i * 1000_000},-;usb 1-1: new device"
               for i in range(3)]
    nvml(devices=[{}, {}])
    out = probe(node(), tree(tmp_path / "t", log=wrapped))
    log = out.data["figures"]["host"]["kernel_log"]
    assert (log["first_seq"], log["oldest_s"], log["newest_s"]) == (5000, 812345.0, 812347.0)
    v = judged({"n1": out}, "n1")
    assert v.passed and v.warnings == (
        f"kernel log ({log['source']}) read from 9.4 days after boot, not from boot: the file "
        f"begins there, so XIDs and SXids of the first 9.4 days are not checked",), v.warnings
    # dmesg text has no sequence numbers: a first line past 0.000000 s says the same.
    text = probe(node(), tree(tmp_path / "d", log=["[ 7200.250000] eth0: link up"]))
    assert judged({"n1": text}, "n1").warnings[0].startswith(
        f"kernel log ({tmp_path / 'd' / 'kmsg'}) read from 2.0 h after boot, not from boot")
    whole = probe(node(), tree(tmp_path / "w", log=[BOOT, *wrapped]))
    assert judged({"n1": whole}, "n1").warnings == ()


def test_the_span_names_the_uptime_and_a_read_cut_short():
    from burnin.checks.host import kernel_log_rules
    log = {"source": "/dev/kmsg", "readable": True, "xids": [], "sxids": [], "first_seq": 77,
           "oldest_s": 3 * 86400.0, "newest_s": 40 * 86400.0, "uptime_s": 40 * 86400.0,
           "overruns": 2, "complete": False}
    failures, warnings = kernel_log_rules([], log, True, str)
    assert failures == []
    assert warnings == [
        "kernel log (/dev/kmsg) read from 3.0 days after boot, not from boot (up 40.0 days): "
        "the kernel's ring buffer had overwritten the older messages, so XIDs and SXids of "
        "the first 3.0 days are not checked",
        "2 kernel log records were overwritten while being read: XIDs and SXids in them are "
        "not checked",
        "kernel log read stopped at its bound at 40.0 days after boot: later XIDs and SXids "
        "are not checked"]


def test_the_xid_table_is_nvidias_catalogue_with_its_source():
    from burnin.model import xid
    assert "docs.nvidia.com/deploy/xid-errors" in xid.CATALOGUE and "2026-" in xid.CATALOGUE
    assert set(range(136, 155)) <= set(xid.XIDS)
    assert xid.meaning(11) == "XID 11 (Invalid or corrupted push buffer stream)"
    assert xid.meaning(9999) == "XID 9999 (not in NVIDIA Xid catalogue)"
    assert not xid.in_service(9999), "an unknown code fails"
    # The warnings are exactly the catalogue's RESTART_APP and IGNORE rows, bar the two
    # judged by the catalogue's own trigger text.
    warn = {c for c in xid.XIDS if xid.in_service(c)}
    assert warn == {c for c, (_, a) in xid.XIDS.items() if a in xid.IN_SERVICE} - {32} | {45}
    assert {8, 13, 31, 43, 45, 94, 137} <= warn and not {32, 48, 79, 95, 140, 154} & warn
    assert xid.recovery_action("GPU recovery action changed from 0x0 (None) to 0x1 (GPU "
                               "Reset Required)") == (1, "GPU Reset Required")


# Where a controller really runs: an ordinary account (a Slurm job's service
# account, a container's user), on a kernel with dmesg_restrict=1 as Debian and Ubuntu ship,
# runs the suite against emulated GPU nodes, as a real process with that uid.
def test_an_ordinary_account_fails_health_naming_the_fix_or_passes_with_kernel_log_off(finding):
    problem = _cannot_switch_users()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"the ordinary-account test cannot run in CI: {problem}")
        pytest.skip(problem)
    name = f"bkl{os.getpid() % 100000}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell",
                    "/usr/sbin/nologin", name], check=True, capture_output=True, timeout=60)
    restrict = Path("/proc/sys/kernel/dmesg_restrict")
    before = restrict.read_text()
    home = Path(tempfile.mkdtemp(prefix="burnin-ordinary-"))
    try:
        restrict.write_text("1\n")
        uid, gid = pwd.getpwnam(name).pw_uid, grp.getgrnam(name).gr_gid
        os.chown(home, uid, gid)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", **NO_HYPOTHESIS,
               # The venv's packages and the checkout, for an interpreter outside the venv.
               "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])}
        python = _interpreter_for(uid, gid, env)
        scenario = nvmlemu.write_scenario(home / "nvml.json", {"devices": [{}, {}]})
        wrapper = nvmlemu.python_wrapper(home / "node-python", scenario, python=python)
        # One controller, two nodes: one reads the kernel log (auto), one is told not to.
        reports, inv = home / "reports", home / "inv.yaml"
        inv.write_text(
            "version: 1\ndefaults: {transport: local, gpus: 2, gpu_model: H100-SXM5-80GB, "
            f"python: {wrapper}}}\nnodes:\n"
            "  - {name: svc-auto, checks: {health: {kernel_log: auto}}}\n"
            "  - {name: svc-off, checks: {health: {kernel_log: off}}}\n")
        for path in (home, *home.iterdir()):
            os.chown(path, uid, gid)
        done = subprocess.run(
            [python, "-m", "pytest", str(REPO / "suites"), "--inventory", str(inv),
             "--reports", str(reports), "-p", "no:cacheprovider", "-k", "health"],
            user=uid, group=gid, extra_groups=[], env=env, cwd=home,
            capture_output=True, text=True, timeout=300)
        for setting, outcome in (("auto", "failure"), ("off", "passed")):
            case = _health_case(reports, f"svc-{setting}")
            assert case is not None, done.stdout[-3000:] + done.stderr[-3000:]
            assert case[0] == outcome, (setting, case, done.stdout[-3000:])
            if setting == "auto":
                message = case[1]
                assert f"kernel log unreadable as uid {uid} ({name})" in message, message
                assert "kernel.dmesg_restrict=1" in message
                for fix in ("root or CAP_SYSLOG", "group adm or systemd-journal",
                            "set checks.health.kernel_log: off"):
                    assert fix in message, (fix, message)
                finding(f"ordinary account, dmesg_restrict=1: health {case[0]}: {message}")
            else:
                assert "kernel log not read (checks.health.kernel_log: off): XIDs and NVSwitch " \
                       "SXids since boot not checked" in case[2], case
                finding(f"ordinary account, kernel_log: off: health {case[0]}")
    finally:
        restrict.write_text(before)
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run(["userdel", name], capture_output=True, timeout=60)


def _cannot_switch_users() -> str:
    if os.geteuid() != 0:
        return "creating an account and setting kernel.dmesg_restrict need root"
    missing = [t for t in ("useradd", "userdel") if not shutil.which(t)]
    if missing:
        return f"missing tools: {', '.join(missing)} (apt-get install passwd)"
    if not os.access("/proc/sys/kernel/dmesg_restrict", os.W_OK):
        return "kernel.dmesg_restrict is not writable here (a container's read-only /proc/sys)"
    return ""


def _interpreter_for(uid: int, gid: int, env: dict) -> str:
    """This test's interpreter where the account may run it, else a system one of the same
    version (a venv made from a Python under root's home is out of the account's reach)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if not os.path.exists(python):
            continue
        try:
            # torch found, not imported (1 to 2 s of CPU): a closed directory on the way to
            # the venv hides it from find_spec as from import (one inside torch's own tree
            # would show as the svc-off node's health failing on torch).
            ok = subprocess.run([python, "-c", "import burnin, pynvml, pytest, importlib.util; "
                                 "assert importlib.util.find_spec('torch')"],
                                user=uid, group=gid, extra_groups=[], env=env, cwd="/",
                                capture_output=True, timeout=120)
        except PermissionError:  # exec refused: a directory on its path is closed to uid
            continue
        if ok.returncode == 0:
            return python
    pytest.fail(f"no {version} that uid {uid} may run with this venv's packages and this "
                f"checkout: is a directory on the way to {REPO} or to the venv closed to "
                f"other users?")


def _health_case(reports: Path, node: str) -> tuple[str, str, str] | None:
    """(outcome, message, system-out) of `node`'s health testcase in the run's junit.xml."""
    path = reports / "latest" / "junit.xml"
    if not path.exists():
        return None
    for suite in ET.parse(path).getroot().iter("testsuite"):
        if suite.get("name") != node:
            continue
        case = suite.find("testcase[@name='health']")
        if case is None:
            return None
        out = case.findtext("system-out") or ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                return tag, el.get("message") or "", out
        return "passed", "", out
    return None
