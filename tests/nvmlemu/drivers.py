"""The driver-version matrix: which symbols the libnvidia-ml.so.1 of a driver branch exports.

pynvml resolves a symbol when it is first called, so a function the driver lacks raises
NVMLError_FunctionNotFound at that call, never at import: the emulated library of an older
branch simply lacks the attribute, and pynvml answers as it does for a real library.

Where the facts come from:
- SINCE: nvml.h as NVIDIA/go-nvml keeps it, one commit per CUDA release
  (gen/nvml/nvml.h: 12.0 = R525, 12.1 = R530, 12.2 = R535, 12.4 = R550, 12.6 = R560,
  12.8 = R570, 13.0 = R580, 13.1, 13.3). A symbol is listed from the first of those headers
  that declares it; every other symbol the emulator declares is in all of them.
  nvmlDeviceGetCurrentClocksEventReasons: first in 12.2 (R535); R525 has only
  nvmlDeviceGetCurrentClocksThrottleReasons. nvmlDeviceGetTemperatureV: first in 12.8
  (R570; CUDA 12.7 / R565 was not checked, and is taken to lack it).
- CUDA14: no such driver exists yet. nvml.h 13.x marks nvmlDeviceGetTemperature,
  nvmlDeviceGetCurrentClocksThrottleReasons, nvmlDeviceGetApplicationsClock and
  nvmlDeviceGetDefaultApplicationsClock (among others) DEPRECATED(13.0), and
  nvidia-ml-py 13.615's pynvml.py says of each "will be removed in CUDA 14.0". The
  CUDA14 branch is R580 without every symbol pynvml says that of (read from the installed
  pynvml.py, so that it follows what pynvml announces).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class Branch:
    """A driver branch: its number orders it; a release of it stands for the branch."""

    name: str
    number: int
    driver_version: str | None = None   # a real release of the branch, when known
    cuda_driver_version: int | None = None  # what that release's CUDA driver API is
    cuda14: bool = False  # without what pynvml says CUDA 14.0 removes


BRANCHES = {b.name: b for b in (
    Branch("R525", 525, "525.147.05", 12000),
    Branch("R535", 535, "535.230.02", 12020),
    Branch("R550", 550, "550.54.15", 12040),
    Branch("R570", 570, "570.86.15", 12080),
    Branch("R580", 580, "580.65.06", 13000),
    # A placeholder: 999 orders it after every real branch; no CUDA 14 driver is out.
    Branch("CUDA14", 999, "999.0.0", 14000, cuda14=True),
)}

# The first branch whose nvml.h declares the symbol (see above).
SINCE = {
    "nvmlDeviceGetCurrentClocksEventReasons": 535,
    "nvmlDeviceGetTemperatureV": 570,
    # nvmlDeviceGetGpuFabricInfoV and nvmlGpuFabricInfo_v2: first in 12.4 (R550); v3 in
    # 13.0 (R580, fabric.py). nvmlDeviceGetGpuFabricInfo: in 12.2's header (12.1 not read).
    "nvmlDeviceGetGpuFabricInfoV": 550,
    "nvmlDeviceGetGpuFabricInfo": 535,
}


def branch_of(driver_version: str) -> Branch:
    """The branch of a driver version ('535.230.02' -> R535)."""
    m = re.match(r"(\d+)\.", driver_version or "")
    if not m:
        raise ValueError(f"driver_version {driver_version!r} is not <branch>.<minor>[.<patch>]")
    number = int(m[1])
    return next((b for b in BRANCHES.values() if b.number == number and not b.cuda14),
                Branch(f"R{number}", number))


@cache
def removed_in_cuda14() -> frozenset[str]:
    """The C symbols of the pynvml functions its source says CUDA 14.0 removes."""
    import pynvml
    source = Path(pynvml.__file__).read_text(encoding="utf-8")
    out = set()
    for m in re.finditer(r"#[^\n]*will be removed in CUDA 14[^\n]*\n\s*def (\w+)\(", source):
        body = source[m.end():]
        body = body[:body.find("\ndef ")] if "\ndef " in body else body
        out |= set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', body))
    return frozenset(out)


def exports(symbol: str, branch: Branch) -> bool:
    """Whether the library of `branch` exports `symbol`."""
    if branch.number < SINCE.get(symbol, 0):
        return False
    return not (branch.cuda14 and symbol in removed_in_cuda14())
