"""The probes a run sends: the shipped ones (probes/) and the probe of each check an
installed distribution brings (Check.probe_path), in one directory. A transport stages a
directory whole (ssh's archive, srun's files), and a probe imports probelib from beside
it, so an outside check's probe joins a copy of the shipped ones rather than running from
its distribution's folder."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from burnin.checks import Check

_made: dict[tuple, Path] = {}
_lock = threading.Lock()


def probes_for(base: Path, checks: Iterable[Check]) -> Path:
    """`base` itself when no check brings its own probe file; else a private directory
    (made once per process, removed at its exit) holding base's probes and each such
    check's file as <probe_name>.py. A name of base's is never replaced: the loader
    (burnin/extensions.py) refuses an outside check whose probe name is a shipped one."""
    outside = {c.probe_name: Path(c.probe_path) for c in checks if c.probe_path}
    if not outside:
        return base
    key = (str(base), tuple(sorted((n, str(p)) for n, p in outside.items())))
    with _lock:
        if key in _made:
            return _made[key]
        made = Path(tempfile.mkdtemp(prefix="burnin-probes-"))
        atexit.register(shutil.rmtree, made, True)
        for f in base.glob("*.py"):
            shutil.copyfile(f, made / f.name)
        for name, source in outside.items():
            if not (made / f"{name}.py").exists():
                shutil.copyfile(source, made / f"{name}.py")
        _made[key] = made
        return made
