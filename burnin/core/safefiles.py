"""Writing files the way reports and ledgers need: whole or not at all, durable where a
crash must not lose what was written, private to their owner."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def write_atomically(path: Path, text: str | Iterable[str], durable: bool = False) -> None:
    """Replace `path` with `text` (a text, or its pieces as they are made) in one step: a
    reader (a pipeline, node_exporter's textfile collector) never sees half a file.
    `durable`: on disk before it is visible."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            if isinstance(text, str):
                f.write(text)
            else:  # pieces that may fail as they are made: the old file stays, no tmp
                f.writelines(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def append_durably(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def private_dirs(path: Path) -> None:
    """mkdir -p, each directory it makes readable by its owner only (existing ones are
    left as their owner set them): reports and ledgers hold node facts and evidence."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for p in reversed(missing):
        try:
            p.mkdir(mode=0o700)
        except FileExistsError:
            pass
