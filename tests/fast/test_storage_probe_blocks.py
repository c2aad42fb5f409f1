"""probes/storage.py's verification, in-process: every block read back must be the block
written at that offset, by this stream of this run. A block that is whole and valid but
sits at another offset (a misdirected write, a remapped sector, a file system that
returned the wrong extent) is caught by its header's offset alone."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path

import pytest

PROBES = Path(__file__).resolve().parents[2] / "probes"
BLOCK = 64 << 10
TOKEN = b"run-token-16byte"


@pytest.fixture(scope="module")
def probe():
    """probes/storage.py as a module (it imports its siblings probelib and directio)."""
    sys.path.insert(0, str(PROBES))
    try:
        spec = importlib.util.spec_from_file_location("burnin_probe_storage",
                                                      PROBES / "storage.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(PROBES))
    return module


def written(probe, path: Path, blocks: int = 4, index: int = 0):
    """A stream whose file the probe's own write phase wrote (buffered: any file system)."""
    s = probe.Stream(index, str(path), BLOCK, 2, TOKEN)
    direct, why, errors = probe.run_phase([s], "write", False, blocks * BLOCK, None, False,
                                          threading.Event())
    assert errors == [] and s.written == blocks * BLOCK
    return s


def read_back(probe, s, inline: bool = True):
    s.bad, s.bad_count = [], 0
    if inline:
        _, _, errors = probe.run_phase([s], "read", False, None, None, True,
                                       threading.Event())
        assert errors == []
    else:
        probe.verify_after([s], False)
    return sorted(s.bad, key=lambda b: b["offset"])


def swap(path: Path, a: int, b: int) -> None:
    with open(path, "r+b") as f:
        f.seek(a * BLOCK)
        first = f.read(BLOCK)
        f.seek(b * BLOCK)
        second = f.read(BLOCK)
        f.seek(a * BLOCK)
        f.write(second)
        f.seek(b * BLOCK)
        f.write(first)


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "after"])
def test_an_intact_file_reads_back_clean(probe, tmp_path, inline):
    s = written(probe, tmp_path / "s0.dat")
    assert read_back(probe, s, inline) == [] and s.bad_count == 0


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "after"])
def test_a_block_read_back_from_the_wrong_offset_is_caught(probe, tmp_path, inline):
    s = written(probe, tmp_path / "s0.dat")
    swap(tmp_path / "s0.dat", 1, 2)  # two whole, valid blocks of this stream, exchanged
    assert read_back(probe, s, inline) == [
        {"stream": 0, "file": s.path, "offset": BLOCK,
         "problem": f"misplaced: block of stream 0 offset {2 * BLOCK}"},
        {"stream": 0, "file": s.path, "offset": 2 * BLOCK,
         "problem": f"misplaced: block of stream 0 offset {BLOCK}"}]
    assert s.bad_count == 2


def test_a_block_of_another_stream_or_run_is_caught(probe, tmp_path):
    mine = written(probe, tmp_path / "s0.dat")
    other = written(probe, tmp_path / "s1.dat", index=1)
    data = Path(other.path).read_bytes()
    with open(mine.path, "r+b") as f:
        f.seek(BLOCK)
        f.write(data[BLOCK:2 * BLOCK])
    assert [b["problem"] for b in read_back(probe, mine)] == [
        f"misplaced: block of stream 1 offset {BLOCK}"]
    stranger = probe.Stream(0, mine.path, BLOCK, 2, b"another-run-toke")
    stranger.written = mine.written
    assert {b["problem"] for b in read_back(probe, stranger)} == {"not a block of this run"}


def test_a_corrupted_payload_or_header_is_caught(probe, tmp_path):
    s = written(probe, tmp_path / "s0.dat")
    with open(s.path, "r+b") as f:
        f.seek(BLOCK + 1000)
        f.write(b"bit rot!")
        f.seek(3 * BLOCK + 20)
        f.write(b"\xff")
    assert [(b["offset"], b["problem"]) for b in read_back(probe, s)] == [
        (BLOCK, "payload checksum mismatch"), (3 * BLOCK, "header checksum mismatch")]
