"""NVIDIA XID and NVSwitch SXid codes: what each means, and whether it keeps a node out.

One table for every check that meets an XID (health: the kernel log since boot; burn:
NVML's XID events during the load), and one for the SXids the NVSwitch driver logs.

XIDS is NVIDIA's Xid catalogue for Ampere and newer GPUs: "Analyzing Xid Errors with the
Xid Catalog", https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (the
page and its Xid-Catalog.xlsx), as read on 2026-11-23; its newest rows name driver R575.
Each entry is the catalogue's description and its "Resolution Bucket (Immediate Action)":
what must happen to put the GPU back into service. RESTART_APP (the application restarts,
nothing else) and IGNORE (no action) leave the GPU in service: found in the kernel log
they warn, since they say something ran badly on the GPU, not that the GPU is bad. Every
other bucket (RESET_GPU, RESTART_BM, CONTACT_SUPPORT, the WORKFLOW_* decodes, ...) and a
row without one fails, and so does any code not in the table: an unknown code is not a
known-harmless one. Codes the catalogue marks "Unused" on every product are left out
(they fail as unknown). Two rows are judged against their bucket, each for the reason the
catalogue itself gives (IN_SERVICE_BY_TEXT, FAULT_BY_TEXT); XID 154 carries the
driver's own recovery action in its text (recovery_action()).
"""

from __future__ import annotations

import re

CATALOGUE = ("NVIDIA Xid catalogue, docs.nvidia.com/deploy/xid-errors/"
             "analyzing-xid-catalog.html, read 2026-11-23")
IN_SERVICE = frozenset({"RESTART_APP", "IGNORE"})

# code: (NVIDIA's description, Resolution Bucket (Immediate Action); None: the row has none)
XIDS: dict[int, tuple[str, str | None]] = {
    8: ("GPU stopped processing", "RESTART_APP"),
    11: ("Invalid or corrupted push buffer stream", "RESTART_APP"),
    13: ("Graphics Engine Exception", "RESTART_APP"),
    14: ("fake or injected error from userspace", "IGNORE"),
    25: ("Invalid or illegal push buffer stream", "RESTART_APP"),
    31: ("GPU memory page fault", "RESTART_APP"),
    32: ("Invalid or corrupted push buffer stream", "RESTART_APP"),
    37: ("Driver firmware error", "IGNORE"),
    38: ("Driver firmware error", "IGNORE"),
    39: ("Copy Engine Exception", "RESTART_APP"),
    40: ("Copy Engine Exception", "RESTART_APP"),
    41: ("Copy Engine Exception", "RESTART_APP"),
    43: ("GPU stopped processing", "IGNORE"),
    44: ("Graphics Engine fault during context switch", "IGNORE"),
    45: ("Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45"),
    46: ("GPU stopped processing", "RESET_GPU"),
    48: ("Double Bit ECC Error", "WORKFLOW_XID_48"),
    54: ("Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS"),
    60: ("Video processor exception", "RESTART_APP"),
    62: ("Internal micro-controller halt", "RESET_GPU"),
    63: ("GPU memory remapping event", "IGNORE"),
    64: ("GPU memory remapping failure", "RESET_GPU"),
    66: ("Illegal access by driver", "IGNORE"),
    67: ("Illegal access by driver", "IGNORE"),
    68: ("NVDEC0 Exception", "RESTART_APP"),
    69: ("Graphics Engine class error", "RESTART_APP"),
    70: ("CE3: Unknown Error", "RESTART_APP"),
    71: ("CE4: Unknown Error", "RESTART_APP"),
    72: ("CE5: Unknown Error", "RESTART_APP"),
    74: ("NVLINK Error", "WORKFLOW_NVLINK_ERR"),
    75: ("CE6: Unknown Error", "RESTART_APP"),
    76: ("CE7: Unknown Error", "RESTART_APP"),
    77: ("CE8: Unknown Error", "RESTART_APP"),
    78: ("vGPU Start Error", "UPDATE_SWFW"),
    79: ("GPU has fallen off the bus", "RESTART_BM"),
    80: ("Corrupted data sent to GPU", "RESTART_APP"),
    82: ("NVJPG0 Error", "RESTART_APP"),
    83: ("NVDEC1 Error", "RESTART_APP"),
    84: ("NVDEC2 Error", "RESTART_APP"),
    85: ("CE9: Unknown Error", "RESTART_APP"),
    86: ("OFA Exception", "RESTART_APP"),
    88: ("NVDEC3 Error", "RESTART_APP"),
    89: ("NVDEC4 Error", "RESTART_APP"),
    92: ("High single-bit ECC error rate", "IGNORE"),
    93: ("Non-fatal violation of provisioned InfoROM wear limit", "IGNORE"),
    94: ("Contained memory error", "RESTART_APP"),
    95: ("Uncontained memory error", "RESET_GPU"),
    96: ("NVDEC5 Error", "RESTART_APP"),
    97: ("NVDEC6 Error", "RESTART_APP"),
    98: ("NVDEC7 Error", "RESTART_APP"),
    99: ("NVJPG1 Error", "RESTART_APP"),
    100: ("NVJPG2 Error", "RESTART_APP"),
    101: ("NVJPG3 Error", "RESTART_APP"),
    102: ("NVJPG4 Error", "RESTART_APP"),
    103: ("NVJPG5 Error", "RESTART_APP"),
    104: ("NVJPG6 Error", "RESTART_APP"),
    105: ("NVJPG7 Error", "RESTART_APP"),
    106: ("SMBPBI Test Message", "IGNORE"),
    107: ("SMBPBI Test Message Silent", "IGNORE"),
    108: ("NVLink remote translation error", "IGNORE"),
    109: ("Context Switch Timeout Error", "RESET_GPU"),
    110: ("Security Fault Error", "RESET_GPU"),
    119: ("GSP RPC Timeout", "RESET_GPU"),
    120: ("GSP Error", "RESET_GPU"),
    121: ("C2C Error", "IGNORE"),
    **{c: (f"CE{c - 116}: Unknown Error", "RESTART_APP") for c in range(126, 136)},
    136: ("Link Training Failed", "RESET_GPU"),
    137: ("NVLink Privilege Error", "IGNORE"),
    138: ("DLA error", "CONTACT_SUPPORT"),
    139: ("OFA1 Error", "RESTART_APP"),
    140: ("ECC Unrecovered Error", "RESET_GPU"),
    141: ("CUDA Fast Path Error", "IGNORE"),
    142: ("NVENC3 Error", "CONTACT_SUPPORT"),
    143: ("GPU Initialization Error", "RESET_GPU"),
    144: ("NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR"),
    151: ("Key rotation Error", "RESTART_VM"),
    152: ("DLA SMMU Error", "IGNORE"),
    153: ("DLA timeout Error", "IGNORE"),
    154: ("GPU Recovery Action Changed", "XID_154"),
    155: ("NVLINK: SW Defined Error", "RESET_GPU"),
    156: ("Resource Retirement Event", "RESET_GPU"),
    157: ("Resource Retirement Failure", "IGNORE"),
    158: ("GPU Fatal Timeout", "RESET_GPU"),
    159: ("CHI Non-Data Error", "CHECK_UVM"),
    160: ("Channel Retirement Event", "IGNORE"),
    161: ("Channel Retirement Failure", "IGNORE"),
    # Rows 162-172 are newer than their buckets: the catalogue gives none (or free text),
    # so they fail until it does.
    162: ("Power Smoothing HW Circuitry capability reengaged", None),
    163: ("Power Smoothing HW Circuitry capability disengaged", None),
    164: ("Power Smoothing HW Circuitry low lifetime reached", None),
    165: ("Power Smoothing HW Circuitry lifetime exhausted", None),
    166: ("CC traffic seen before the link was configured for encryption", None),
    167: ("PCIe fatal timeout", None),
    168: ("Errors found in WPR (reduced GPU memory capacity)", None),
    169: ("Internal micro-controller halt (SEC2)", None),
    170: ("Interrupt seen in CC mode", None),
    171: ("Uncorrectable DRAM error (details of an XID 48)", None),
    172: ("Uncorrectable SRAM error (details of an XID 48)", None),
}
# The catalogue's bucket is a workflow, and its trigger text names user or system action
# (Control-C, SIGKILL, a GPU reset tearing the application down); not alone, it says to
# follow the other XID, which is judged on its own.
IN_SERVICE_BY_TEXT = {45: "an application torn down (Control-C, a kill, a reset)"}
# RESTART_APP, but the catalogue's trigger text: "primarily involve quality issues on PCI,
# and are generally not caused by user application actions".
FAULT_BY_TEXT = {32: "PCIe quality, not the application (NVIDIA's trigger text)"}

# "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)": the format
# of nvErrorLog_va(GPU_RECOVERY_ACTION_CHANGED) in NVIDIA's open-gpu-kernel-modules
# (src/nvidia/src/kernel/gpu/gpu.c, 595.45.04); 0 is NV2080_CTRL_GPU_RECOVERY_ACTION_NONE.
RECOVERY = re.compile(r"recovery action changed from (0x[0-9a-fA-F]{1,8}) \(([^()]{0,40})\) "
                      r"to (0x[0-9a-fA-F]{1,8}) \(([^()]{0,40})\)")


def meaning(code: int) -> str:
    """`XID 79 (GPU has fallen off the bus)`."""
    known = XIDS.get(code)
    return f"XID {code} ({known[0] if known else 'not in NVIDIA Xid catalogue'})"


def immediate_action(code: int) -> str:
    """NVIDIA's Immediate Action for the code, as the verdict quotes it."""
    known = XIDS.get(code)
    if not known:
        return "none known: not in the catalogue, so judged a fault"
    return known[1] or "none given in the catalogue, so judged a fault"


def in_service(code: int) -> bool:
    """Whether NVIDIA's catalogue leaves the GPU in service after this code (the
    application's doing, or nothing to do): such XIDs warn, every other one fails."""
    if code in FAULT_BY_TEXT:
        return False
    if code in IN_SERVICE_BY_TEXT:
        return True
    known = XIDS.get(code)
    return bool(known and known[1] in IN_SERVICE)


def recovery_action(text: str) -> tuple[int, str] | None:
    """(code, name) of the action an XID 154 says the GPU now needs, or None when its text
    is not the driver's format (then the XID fails, as any unread fault does)."""
    m = RECOVERY.search(text or "")
    if not m:
        return None
    return int(m.group(3), 16), m.group(4)


# NVSwitch SXids: the driver writes each one as "nvidia-nvswitchN: SXid (PCI:dddd:bb:dd.f):
# NNNNN, <Correctable|Non-fatal|Fatal>, Link LL <what>" (NVSWITCH_PRINT_SXID and the
# NVSWITCH_REPORT_* macros in open-gpu-kernel-modules, src/common/nvswitch). Which codes
# need no recovery is NVIDIA's Fabric Manager User Guide (DU-09883-001 v1.3, October
# 2023), appendix D.4 "Non-Fatal NVSwitch SXid Errors", the rows whose recovery is "Not
# Applicable"; burnin read that table as transcribed by leptonai/gpud (sxid.go), not on
# NVIDIA's page (guide v2.3, March 2025, records that SXid material was removed; SXids
# exist on Hopper and earlier). Those, and any SXid the driver itself calls Correctable,
# warn; a Fatal one, every other code of D.4 (each needs a recovery), D.5/D.6 (fatal) and
# any unknown code fail.
SXIDS_IN_SERVICE: dict[int, str] = {
    **dict.fromkeys((11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055,
                     19057, 19059, 19062, 19065, 19068, 19071, 24001, 24002, 24003),
                    "single-bit ECC error, corrected by the NVSwitch"),
    20001: "TX replay error: the packet was sent again (NVLink throughput may drop)",
    22013: "Minion link DLREQ interrupt: safe to ignore",
}
SXIDS_FAULT: dict[int, str] = {
    11004: "ingress invalid ACL: NVLink traffic stalls",
    12028: "egress non-posted PRIV error: NVLink traffic stalls",
    19084: "AN1 heartbeat timeout: reset all GPUs and NVSwitches",
    20012: "broken or inconsistent NVLink connection: check the link's mechanics",
}


def sxid_in_service(code: int, text: str) -> bool:
    """Whether an SXid leaves the NVSwitch in service (warn) rather than failing."""
    severity = (text or "").split(",", 1)[0].strip().lower()
    if severity == "fatal":
        return False
    return code in SXIDS_IN_SERVICE or severity == "correctable"


def sxid_meaning(code: int) -> str:
    """`SXid 12028 (egress non-posted PRIV error: NVLink traffic stalls)`."""
    known = SXIDS_IN_SERVICE.get(code) or SXIDS_FAULT.get(code)
    return f"SXid {code} ({known or 'not in burnin SXid table: judged by the driver words'})"
