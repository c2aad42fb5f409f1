"""The kernel log as a real GPU node writes it, judged as NVIDIA means it: XIDs by the
Immediate Action of NVIDIA's Xid catalogue (XID 154 by the recovery action the driver
names), NVSwitch SXids and MIG-annotated XID lines (issue 25, finding 8)."""

from __future__ import annotations

from pathlib import Path

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


def test_the_xid_table_is_nvidias_catalogue_with_its_source():
    from burnin import xid
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
