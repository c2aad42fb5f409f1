"""The environment an inventory gives the probes (`env:` under defaults or a node entry):
what NCCL, gloo and CUDA read when they start, e.g. NCCL_SOCKET_IFNAME, NCCL_IB_HCA,
GLOO_SOCKET_IFNAME, CUDA_DEVICE_MAX_CONNECTIONS.

The probe sets these in its own environment from its settings (probes/probelib.py), before
it imports torch or starts NCCL or gloo, and records what it set in its document. Values
travel in the settings' JSON, never in a command line, so no shell ever reads them.
A name the probe cannot honour is refused here, before any node is touched.
"""

from __future__ import annotations

import re

NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
MAX_NAMES = 64
MAX_VALUE = 4096

# Names a probe's own process cannot take from its settings, and why.
RESERVED_PREFIXES = {
    "BURNIN_": "burnin's own: the probes' protocol and the project's test-only hooks",
    "LD_": "the dynamic loader reads it when the process starts, before the probe can set "
           "it; set it in the node's environment or point `python:` at a wrapper",
    "PYTHON": "the interpreter reads it when it starts, before the probe can set it; set it "
              "in the node's environment or point `python:` at a wrapper",
    "SLURM_": "Slurm sets it for the step, and the probes read it to find their rank",
}
RESERVED_NAMES = {
    name: "the all-reduce probe sets it for each rank it starts"
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
}


def name_problem(name: object) -> str:
    """Why `name` cannot be an `env:` entry, or ''."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return (f"{name!r} is not an environment variable name; expected capital letters, "
                "digits and '_', not starting with a digit ([A-Z_][A-Z0-9_]*)")
    if name in RESERVED_NAMES:
        return f"{name} cannot be set here: {RESERVED_NAMES[name]}"
    for prefix, why in RESERVED_PREFIXES.items():
        if name.startswith(prefix):
            return f"{name} cannot be set here: {why}"
    return ""


def value_problem(value: object) -> str:
    """Why `value` cannot be an `env:` value, or ''."""
    if not isinstance(value, str):
        shown = "nothing" if value is None else f"{type(value).__name__} {value!r}"
        return (f"expected a string, got {shown}; quote it (YAML reads 22 as a number and "
                "off as false)")
    if "\x00" in value:
        return "a NUL character cannot be in an environment variable"
    if len(value) > MAX_VALUE:
        return f"{len(value)} characters, at most {MAX_VALUE} expected"
    return ""
