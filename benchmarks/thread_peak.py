"""pytest plugin for benchmarks and tests only: the most threads the controller's process
had alive at once, counted each time one starts (not sampled: a round of groups that
comes and goes between two samples is still seen), written as JSON to the file that
BURNIN_THREAD_PEAK names when pytest ends. Load with `-p thread_peak` and benchmarks/ on
PYTHONPATH."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter

_peak: dict = {"threads": threading.active_count(), "names": {}}
_lock = threading.Lock()
_start = threading.Thread.start


def _counted_start(self, *args, **kwargs):
    _start(self, *args, **kwargs)
    alive = threading.active_count()
    with _lock:
        if alive > _peak["threads"]:
            # By name without the numbers: which kind of thread there were so many of.
            names = Counter(t.name.rstrip("0123456789_-") for t in threading.enumerate())
            _peak.update(threads=alive, names=dict(names.most_common(5)))


threading.Thread.start = _counted_start  # type: ignore[method-assign]


def pytest_unconfigure(config) -> None:
    path = os.environ.get("BURNIN_THREAD_PEAK")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_peak, f)
