"""NVIDIA XID codes: what each means, and whether it keeps a node out.

One table for every check that meets an XID (health: the kernel log since boot; burn:
NVML's XID events during the load). The meanings are NVIDIA's (the XID catalogue of the
GPU deployment and management documentation); which ones fail follows the XIDs that
Azure's HPC health checks and DCGM treat as hardware or driver faults. Those NVIDIA lists
as usually caused by the application (a bad kernel, a page fault, a killed process) only
warn when found in the kernel log: they say something ran badly on the GPU, not that the
GPU is bad. Any XID not in the table fails: an unknown code is not a known-harmless one.
"""

from __future__ import annotations

# code: (meaning, caused by the application rather than the GPU or driver)
XIDS: dict[int, tuple[str, bool]] = {
    8: ("GPU stopped responding (driver or application)", True),
    13: ("graphics engine exception", True),
    31: ("GPU memory page fault", True),
    32: ("invalid or corrupted push buffer stream", False),
    38: ("driver firmware error", False),
    43: ("GPU stopped processing (application fault)", True),
    45: ("preemptive cleanup, after an earlier error or a killed process", True),
    48: ("double-bit ECC error", False),
    56: ("display engine error", False),
    57: ("error programming video memory interface", False),
    58: ("unstable video memory interface detected", False),
    61: ("internal micro-controller breakpoint or warning", False),
    62: ("internal micro-controller halt", False),
    63: ("ECC page retirement or row remapping recorded", False),
    64: ("ECC page retirement or row remapper recording failure", False),
    65: ("video processor exception", False),
    68: ("video decoder (NVDEC) exception", False),
    69: ("graphics engine class error", False),
    73: ("NVENC2 error", False),
    74: ("NVLink error", False),
    79: ("GPU has fallen off the bus", False),
    80: ("corrupted data sent to the GPU", False),
    81: ("VGA subsystem error", False),
    92: ("high single-bit ECC error rate", False),
    94: ("contained ECC error (the GPU needs a reset)", False),
    95: ("uncontained ECC error (the GPU needs a reset)", False),
    109: ("context switch timeout", False),
    119: ("GSP RPC timeout", False),
    120: ("GSP error", False),
    121: ("C2C link error", False),
    122: ("SPI PMU RPC read failure", False),
    123: ("SPI PMU RPC write failure", False),
    136: ("link training failed", False),
    140: ("unrecovered ECC error", False),
    143: ("GPU initialisation failure", False),
    144: ("NVLink SAW MVB error", False),
    145: ("NVLink RLW error", False),
    149: ("NVLink NETIR error", False),
    154: ("GPU recovery action changed", False),
}


def meaning(code: int) -> str:
    """`XID 79 (GPU has fallen off the bus)`."""
    known = XIDS.get(code)
    return f"XID {code} ({known[0] if known else 'not in burnin XID table'})"


def application_caused(code: int) -> bool:
    """Whether NVIDIA lists the code as usually the application's doing."""
    known = XIDS.get(code)
    return bool(known and known[1])
