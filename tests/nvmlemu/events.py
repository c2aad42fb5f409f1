"""Event sets: XID events of the scenario delivered through nvmlEventSetCreate,
nvmlDeviceRegisterEvents, nvmlEventSetWait_v2 and nvmlEventSetFree.

As nvml.h documents, a set records only what happens after a device was registered with
it: an XID whose time came before the registration is not delivered to that set.
"""

from __future__ import annotations

import ctypes
import time
from ctypes import c_uint, c_ulonglong

import pynvml as nv

from . import scenario as sc
from .calls import NO_INSTANCE
from .declarations import DEVICE, EVENT_SET, P, export

XID = 0x8  # nvmlEventTypeXidCriticalError
KNOWN_TYPES = 0xFFFF  # nvmlEventType* bits nvml.h defines
SUPPORTED_TYPES = 0x1 | 0x2 | 0x4 | XID | 0x10  # ECC single/double bit, PState, XID, clock
POLL_S = 0.01


class EventSet:
    def __init__(self):
        self.block = ctypes.create_string_buffer(16)  # its address is the nvmlEventSet_t
        self.registered: dict[int, tuple[int, float]] = {}  # device -> (types, since)
        self.delivered: set[int] = set()  # indices into scenario.xid_events


def _event_set(emu, handle) -> EventSet | None:
    address = ctypes.cast(handle, ctypes.c_void_p).value if handle else None
    return emu.event_sets.get(address)


@export("nvmlEventSetCreate", P(EVENT_SET))
def _create(emu, out):
    if not out:
        return sc.INVALID_ARGUMENT
    es = EventSet()
    with emu.lock:
        emu.event_sets[ctypes.addressof(es.block)] = es
    out[0] = ctypes.cast(ctypes.addressof(es.block), EVENT_SET)
    return sc.SUCCESS


@export("nvmlDeviceRegisterEvents", DEVICE, c_ulonglong, EVENT_SET, reads="xid_events")
def _register(emu, dev, types, handle):
    es = _event_set(emu, handle)
    if es is None or not types or types & ~KNOWN_TYPES:
        return sc.INVALID_ARGUMENT
    if types & ~SUPPORTED_TYPES:
        return sc.NOT_SUPPORTED  # nvml.h: then none of the requested types is registered
    with emu.lock:
        old, since = es.registered.get(dev.index, (0, emu.elapsed()))
        es.registered[dev.index] = (old | types, since)
    return sc.SUCCESS


def _next_event(emu, es: EventSet) -> int | None:
    now = emu.elapsed()
    for i, ev in enumerate(emu.scenario.xid_events):
        types, since = es.registered.get(ev.device, (0, 0.0))
        if i not in es.delivered and types & XID and since <= ev.at_s <= now:
            return i
    return None


@export("nvmlEventSetWait_v2", EVENT_SET, P(nv.c_nvmlEventData_t), c_uint)
def _wait(emu, handle, data, timeout_ms):
    es = _event_set(emu, handle)
    if es is None or not data:
        return sc.INVALID_ARGUMENT
    deadline = time.monotonic() + timeout_ms / 1000.0
    while True:
        with emu.lock:
            i = _next_event(emu, es)
            if i is not None:
                es.delivered.add(i)
        if i is not None:
            ev = emu.scenario.xid_events[i]
            d = data.contents
            d.device = emu.devices[ev.device].handle
            d.eventType, d.eventData = XID, ev.xid
            d.gpuInstanceId = d.computeInstanceId = NO_INSTANCE
            return sc.SUCCESS
        if any(emu.devices[index].get("lost") for index in es.registered):
            return sc.GPU_IS_LOST
        left = deadline - time.monotonic()
        if left <= 0:
            return sc.TIMEOUT
        time.sleep(min(POLL_S, left))


@export("nvmlEventSetFree", EVENT_SET)
def _free(emu, handle):
    es = _event_set(emu, handle)
    if es is None:
        return sc.INVALID_ARGUMENT
    with emu.lock:
        del emu.event_sets[ctypes.addressof(es.block)]
    return sc.SUCCESS
