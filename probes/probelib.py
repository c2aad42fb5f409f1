"""What every probe shares: the protocol (settings in, one JSON document out), the
controller lifeline (a probe never runs on alone), and the node's devices.

Runs ON a node: Python's standard library only; torch and pynvml are imported lazily,
so the health probe works where they are missing. Imports nothing of burnin.

Devices: a probe tests exactly the devices the node must have. `gpus` in the payload is
the inventory's count (or the count the controller learned); absent, it is what NVML
reports, so a GPU node whose GPUs torch cannot see fails, by hand too. A node that should
have GPUs is never measured on its CPU: `gpus: 0` is the only way to test a CPU. Torch's
devices are paired with NVML's by UUID, never by index.

A GPU with MIG on is not a CUDA device: CUDA sees MIG devices (UUID "MIG-...") in its
place. A MIG device is never taken for a GPU; where one stands for a GPU the node should
have, the probe says "MIG is on for GPU n (UUID)" and measures nothing.

Environment: the payload's `env` (the inventory's `env:`) is set in this process as soon as
the settings are read, before CUDA, NCCL or gloo start, so the processes a probe starts
inherit it; the document records it under `env`. Probes that import torch before reading
their settings (sdc, burn, memory) get it too late for what torch reads at import.

FOR THE PROJECT'S TESTS ONLY: BURNIN_EMULATE_CUDA="i,j,..." makes torch "see" NVML's
devices i, j, ... (in that order) as cuda:0, cuda:1, ..., each computing on the CPU;
"mig:i" is a MIG device of NVML's GPU i. With
NVML emulated below nvidia-ml-py, every GPU path of the probes (counts, pairing, per-device
workers, telemetry) then runs on a machine without a GPU. Never set it on a fleet.

FOR THE PROJECT'S TESTS ONLY: a payload's `test_hooks` (faults planted in a probe's own
results, pauses between its phases: each probe's docstring says which) come only from a
test that writes the payload itself. The controller never sends them, and an inventory
that names one is refused like any unknown key.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import NoReturn

# Before torch starts CUDA: torch's cuda:i is the i-th GPU in PCI bus order, as NVML's
# index i is. Pairing is by UUID all the same; this keeps logs and indexes consistent.
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
# cuBLAS reads this when CUDA starts: deterministic GEMMs (sdc, burn).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

SCHEMA = 1
EMULATE_ENV = "BURNIN_EMULATE_CUDA"
LOST_GRACE_S = 5.0
# The payload's `env`, as this process set it: every document records it.
APPLIED_ENV: dict[str, str] = {}


def log(probe: str, msg: str) -> None:
    print(f"[{probe}] {msg}", file=sys.stderr, flush=True)


def read_payload() -> dict:
    """The controller's settings: one JSON line on stdin. The controller keeps stdin open
    after it (see watch_controller); by hand, `echo '{}' | probe` or a multi-line file on
    stdin work too, and a terminal means no settings."""
    if sys.stdin is None or sys.stdin.isatty():
        return {}
    line = sys.stdin.readline()
    if not line.strip():
        return {}
    try:
        payload = json.loads(line)
    except json.JSONDecodeError:
        payload = json.loads(line + sys.stdin.read())  # pretty-printed, by hand
    if not isinstance(payload, dict):
        raise ValueError("settings on stdin must be a JSON object")
    apply_env(payload.get("env"))
    return payload


def apply_env(env) -> None:
    """Set the controller's `env` in this process's environment (never through a shell)."""
    if env is None:
        return
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in env.items()):
        raise ValueError("settings: env must map environment variable names to strings")
    if "torch" in sys.modules:  # CUDA, NCCL and gloo read theirs later: only these miss it
        log("probelib", "env set after torch was imported: what torch reads at import "
                        "(OMP_NUM_THREADS) has no effect")
    for name, value in env.items():
        os.environ[name] = value
    APPLIED_ENV.update(env)


def finite(value):
    """`value` with every float that is not finite written as "nan", "inf" or "-inf": JSON
    has no NaN, and the controller refuses a document that holds one."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def emit(probe: str, node: dict, devices: list, figures: dict, errors: list) -> None:
    """Print the probe's one JSON document on stdout."""
    doc = {"probe": probe, "schema": SCHEMA, "node": node, "devices": devices,
           "figures": figures, "errors": errors}
    if APPLIED_ENV:  # what this probe ran under, for the record and the report
        doc["env"] = dict(APPLIED_ENV)
    json.dump(finite(doc), sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    sys.stdout.flush()


def finish(code: int | None) -> NoReturn:
    """End the probe with `code` once main() has returned: stdout and stderr flushed, then
    os._exit, without the interpreter's teardown. Tearing torch down costs 0.3 to 0.4 s of
    CPU a process (more on a busy node) and would only keep the controller waiting: the
    document is out, the kernel frees what the probe held, and no probe registers anything
    to run at exit. A thread still running (a worker past its deadline) dies with it
    instead of holding the exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # the controller went (a broken pipe): there is nobody to tell
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


# --- the controller lifeline -------------------------------------------------------------

def start(doc: str, probe: str) -> dict | None:
    """A probe's first step: with -h or --help, print its doc and return None (nothing to
    run); else read the settings line and start the controller lifeline."""
    if "-h" in sys.argv or "--help" in sys.argv:
        print(doc)
        return None
    payload = read_payload()
    watch_controller(payload, probe)
    return payload


def test_hooks(payload: dict) -> dict:
    """The payload's test-only hooks (never sent by the controller), or none."""
    hooks = payload.get("test_hooks")
    return hooks if isinstance(hooks, dict) else {}


def watch_controller(payload: dict, probe: str) -> None:
    """Stop this probe within seconds of losing its controller, when the controller asks
    for it (payload `watchdog_s`): stdin reaching its end means the controller, or the
    connection to it, is gone; no heartbeat byte for watchdog_s means a silent network.
    The probe's whole process group gets SIGTERM (its own handlers clean up), and
    SIGKILL if it is still there after a grace."""
    limit = payload.get("watchdog_s")
    if not limit or sys.stdin is None:
        return

    def watch() -> None:
        try:
            why = _controller_lost(sys.stdin.fileno(), float(limit))
        except BaseException as e:  # a dead watchdog would leave the probe unwatched
            why = f"the watchdog failed ({type(e).__name__}: {e})"
        _lost(probe, why)

    threading.Thread(target=watch, name="burnin-watchdog", daemon=True).start()


def _controller_lost(fd: int, limit: float) -> str:
    """Wait on the lifeline; return why the controller is lost."""
    while True:
        ready, _, _ = select.select([fd], [], [], limit)
        if not ready:
            return f"no heartbeat from the controller for {limit:g} s"
        try:
            if not os.read(fd, 4096):
                return "the controller is gone (stdin closed)"
        except OSError as e:
            return f"the controller is gone (stdin: {e.strerror})"


def _lost(probe: str, why: str) -> None:
    try:
        log(probe, f"{why}: stopping")
    except (OSError, ValueError):
        pass  # stderr went with the controller (a broken pipe): there is nobody to tell
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except OSError:
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(LOST_GRACE_S)  # still here: a handler is stuck; nothing may outlive us
    try:
        os.killpg(group, signal.SIGKILL)
    finally:
        os._exit(137)


def die_with_parent() -> None:
    """preexec_fn for a probe's own children (all-reduce ranks): the kernel kills them
    when the probe dies, however it dies."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# --- devices -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Device:
    """One device a probe works on: a GPU as torch sees it, or a share of the CPU."""

    index: int                      # this node's device number, 0..
    kind: str                       # "cuda", "cpu", or "emulated" (tests: a GPU on the CPU)
    name: str
    ordinal: int | None = None      # torch's cuda ordinal
    uuid: str | None = None         # NVML's form, "GPU-..."
    pci_bus_id: str | None = None

    @property
    def label(self) -> str:
        """How reports name it: cuda:i, or cpu / cpu:i for a CPU node of several."""
        if self.kind == "cpu":
            return "cpu" if self.index == 0 and self.ordinal is None else f"cpu:{self.index}"
        return f"cuda:{self.index}"

    @property
    def gpu(self) -> bool:
        return self.kind != "cpu"

    @property
    def mig(self) -> bool:
        """A MIG device: a slice of a GPU with MIG on, not a GPU."""
        return (self.uuid or "").startswith("MIG-")

    def describe(self) -> dict:
        out = {"device": self.label, "name": self.name}
        if self.uuid:
            out["uuid"] = self.uuid
        if self.pci_bus_id:
            out["pci_bus_id"] = self.pci_bus_id
        return out


def node_devices(payload: dict) -> tuple[list[Device], str]:
    """(devices, '') for the devices this node must be tested on, or ([], why) when it
    should have GPUs that torch does not see: then nothing is measured."""
    expected = payload.get("gpus")
    if expected == 0:
        return cpu_devices(int(payload.get("cpu_devices") or 1)), ""
    seen, torch_error = cuda_devices()
    # A MIG device is a slice of a GPU, never one of the GPUs the node must be tested on.
    whole = [replace(d, index=i) for i, d in enumerate(d for d in seen if not d.mig)]
    if expected is None:
        nvml = nvml_count()
        expected = nvml if nvml is not None else len(whole)
        if expected == 0:
            return cpu_devices(int(payload.get("cpu_devices") or 1)), ""
    if len(whole) < expected:
        gpus = f"{expected} GPU{'s' * (expected != 1)}"
        mig = mig_gpus()
        if mig:
            named = ", ".join(f"GPU {i} ({uuid})" for i, uuid in mig)
            return [], (f"MIG is on for {named}: CUDA sees MIG devices in its place, not the "
                        f"GPU; the node should have {gpus}, torch sees {len(whole)} whole "
                        "GPUs; nothing is measured")
        why = f": {torch_error}" if torch_error else ""
        return [], (f"the node should have {gpus}, torch sees {len(whole)}{why}; nothing is "
                    "measured on the CPU instead")
    return whole[:expected], ""


def cpu_devices(count: int) -> list[Device]:
    name = cpu_model()
    if count == 1:
        return [Device(0, "cpu", name)]
    return [Device(i, "cpu", name, ordinal=i) for i in range(count)]


def cuda_devices() -> tuple[list[Device], str]:
    """The GPUs torch sees, in torch's order, and torch's own error when it sees none."""
    emulated = os.environ.get(EMULATE_ENV)
    if emulated is not None:
        return _emulated(emulated)
    try:
        import torch
    except Exception as e:
        return [], f"torch is not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        try:
            torch.cuda.init()  # is_available() is silent; init() says why
        except Exception as e:
            return [], f"{type(e).__name__}: {e}"
        return [], "torch.cuda.is_available() is False"
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        uuid = str(getattr(p, "uuid", "") or "")
        out.append(Device(i, "cuda", p.name, ordinal=i,
                          uuid=nvml_uuid(uuid, p.name) if uuid else None,
                          pci_bus_id=_torch_bus_id(p)))
    return out, ""


def nvml_uuid(torch_uuid: str, name: str = "") -> str:
    """torch prints a GPU's UUID bare; NVML prefixes it: 'MIG-' for a MIG device (CUDA
    names one '<GPU name> MIG <profile>', e.g. 'NVIDIA A100-SXM4-40GB MIG 1g.5gb'), else
    'GPU-'."""
    if torch_uuid.startswith(("GPU-", "MIG-")):
        return torch_uuid
    return f"{'MIG' if ' MIG ' in f'{name} ' else 'GPU'}-{torch_uuid}"


def _torch_bus_id(props) -> str | None:
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    return (f"{getattr(props, 'pci_domain_id', 0):08X}:{bus:02X}:"
            f"{getattr(props, 'pci_device_id', 0):02X}.0")


def _emulated(spec: str) -> tuple[list[Device], str]:
    entries = [x.strip() for x in spec.split(",") if x.strip()]
    if not entries:
        return [], f"no CUDA device visible ({EMULATE_ENV} is empty)"
    import pynvml
    pynvml.nvmlInit()
    try:
        out = []
        for i, entry in enumerate(entries):
            mig = entry.startswith("mig:")
            h = pynvml.nvmlDeviceGetHandleByIndex(int(entry.removeprefix("mig:")))
            bus = _text(pynvml.nvmlDeviceGetPciInfo(h).busId)
            name, uuid = _text(pynvml.nvmlDeviceGetName(h)), _text(pynvml.nvmlDeviceGetUUID(h))
            if mig:  # as CUDA names a MIG device of that GPU
                name, uuid = f"{name} MIG 1g.10gb", f"MIG-{uuid.removeprefix('GPU-')}"
            out.append(Device(i, "emulated", name, ordinal=i, uuid=uuid, pci_bus_id=bus))
        return out, ""
    finally:
        pynvml.nvmlShutdown()


def mig_gpus() -> list[tuple[int, str]]:
    """(NVML index, UUID) of each GPU whose MIG mode is on now; [] where NVML cannot say."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                if pynvml.nvmlDeviceGetMigMode(h)[0] == pynvml.NVML_DEVICE_MIG_ENABLE:
                    out.append((i, _text(pynvml.nvmlDeviceGetUUID(h))))
            except pynvml.NVMLError:
                continue  # no MIG on this GPU (not supported), or it is lost: not MIG
        return out
    except Exception:
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def nvml_count() -> int | None:
    """How many GPUs NVML reports, or None when NVML is absent or does not initialise."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def nvml_first(nv, *calls):
    """(value, name of the function that answered) from the first of `calls`, each
    (pynvml function or None, args), that this node has. A function this nvidia-ml-py
    lacks (None: look it up with getattr(nv, name, None)) or this driver lacks is skipped:
    pynvml resolves a C symbol only when it is first called, so the Python function of a
    symbol an older driver lacks exists and raises NVMLError_FunctionNotFound. Any other
    error is raised; when none is there, the last FunctionNotFound is."""
    missing = None
    for fn, args in calls:
        if fn is None:
            continue
        try:
            return fn(*args), fn.__name__
        except nv.NVMLError as e:
            if getattr(e, "value", None) != nv.NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
            missing = e
    raise missing or nv.NVMLError(nv.NVML_ERROR_FUNCTION_NOT_FOUND)


def sig(x: float, digits: int = 6) -> float:
    """x to `digits` significant digits: a CPU's 0.00004 TFLOPS keeps its meaning where a
    fixed number of decimals would round it to 0, and a GPU's 700 keeps its decimals."""
    return float(f"{x:.{digits}g}")


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"
