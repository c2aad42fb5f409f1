"""Memory test engine for the memory probe: the region under test, the patterns, and
the write, read-back and compare passes, all on the device. Runs ON a node; imports
torch and the standard library only, never burnin.

The region is a list of chunks, each a 2-D int64 tensor of rows of ROW_WORDS words (the
row is only a unit of work: words are numbered 0.. across the whole region). A pattern
gives every word a value: a constant (walking ones and zeros), a row repeated (the
checkerboard and its inverse), or a row plus a per-row offset (address-in-address, where
each word holds its own index, and seeded random data). Writing is one torch op per
chunk; the compare reads the region once, against the same scalar, row or an expected
slice built in a scratch buffer, and counts mismatches per slice on the device, with one
host synchronisation per pattern. Only a slice that counted a mismatch is read again,
to say where: word offset, virtual address, expected and found bits.

The compare never writes the region: a read-only verify cannot mask a fault (an in-place
transform would read a wrong word, write it back, and read it again).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch

ROW_WORDS = 1 << 16            # 512 KiB rows: a repeated row stays in the caches
WORD = 8                       # bytes per int64 word
MAX_EXAMPLES = 16              # bad words described per device
MASK64 = (1 << 64) - 1
CHECKER = (0x5555555555555555, 0xAAAAAAAAAAAAAAAA)


def s64(u: int) -> int:
    """The signed int64 holding the 64 bits of `u`."""
    u &= MASK64
    return u - (1 << 64) if u >> 63 else u


def u64(v: int) -> int:
    return v & MASK64


@dataclass
class Chunk:
    rows: torch.Tensor             # (n, width) int64, a view of one allocation
    first_row: int                 # global row index of rows[0]
    address: int                   # virtual address of rows[0, 0]


class Region:
    """The memory under test on one device: chunks, in word order."""

    def __init__(self, chunks: list[Chunk], width: int, dev: torch.device, note: str = "",
                 unmap=None):
        self.chunks, self.width, self.dev, self.note = chunks, width, dev, note
        self._unmap = unmap

    @property
    def rows(self) -> int:
        return sum(c.rows.shape[0] for c in self.chunks)

    @property
    def words(self) -> int:
        return self.rows * self.width

    @property
    def bytes(self) -> int:
        return self.words * WORD

    def close(self) -> None:
        self.chunks = []
        if self._unmap:
            self._unmap()
            self._unmap = None


def _width(nbytes: int) -> int:
    """Row width for a region of `nbytes`: ROW_WORDS, or the whole of a smaller one."""
    words = nbytes // WORD
    return ROW_WORDS if words >= ROW_WORDS else max(1, words)


def _chunk(t: torch.Tensor, width: int, first_row: int) -> Chunk:
    rows = t.view(-1, width)
    return Chunk(rows, first_row, rows.data_ptr())


def host_region(nbytes: int, dev: torch.device) -> Region:
    """`nbytes` of host memory (rounded down to whole rows), one allocation."""
    width = _width(nbytes)
    rows = nbytes // WORD // width
    t = torch.empty(rows * width, dtype=torch.int64, device=dev)
    return Region([_chunk(t, width, 0)], width, dev)


def gpu_region(dev: torch.device, fraction: float, chunk_bytes: int, reserve: int,
               min_chunk: int = 64 << 20) -> Region:
    """`fraction` of the GPU's free memory (less `reserve` for the compare's scratch and
    temporaries), taken in chunks of `chunk_bytes`, halved on each refusal down to
    `min_chunk`: a fragmented heap gives what it can rather than failing the test."""
    free, _ = torch.cuda.mem_get_info(dev)
    want = int(free * fraction) - reserve
    chunks: list[Chunk] = []
    taken, row = 0, 0
    size = max(min_chunk, chunk_bytes) // (ROW_WORDS * WORD) * ROW_WORDS * WORD
    while taken + ROW_WORDS * WORD <= want and size >= min_chunk:
        size_now = min(size, (want - taken) // (ROW_WORDS * WORD) * ROW_WORDS * WORD)
        try:
            t = torch.empty(size_now // WORD, dtype=torch.int64, device=dev)
        except torch.OutOfMemoryError:
            size //= 2
            continue
        chunks.append(_chunk(t, ROW_WORDS, row))
        row += size_now // WORD // ROW_WORDS
        taken += size_now
    return Region(chunks, ROW_WORDS, dev)


# --- FOR THE PROJECT'S TESTS ONLY --------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
MAP_FIXED = 0x10  # Linux; Python's mmap module does not export it


def backed_region(path: str, nbytes: int, aliases: list[tuple[int, int]]) -> Region:
    """The region as a shared mapping of the file `path` (created, sized to `nbytes`), so
    that another process (a test harness) can corrupt the very memory under test; each
    (page, onto) in `aliases` maps the region's page `page` onto the file's page `onto` as
    well (MAP_FIXED): two addresses, one memory, as an address-line fault makes them.
    Everything above the mapping (patterns, compare) is the production code."""
    width = _width(nbytes)
    nbytes = nbytes // WORD // width * width * WORD
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, nbytes)
        prot, page = mmap.PROT_READ | mmap.PROT_WRITE, mmap.PAGESIZE
        base = _libc.mmap(None, nbytes, prot, mmap.MAP_SHARED, fd, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}: {os.strerror(ctypes.get_errno())}")
        for at, onto in aliases:
            if not (0 <= at < nbytes // page and 0 <= onto < nbytes // page):
                raise ValueError(f"alias page {at} -> {onto} outside the region")
            got = _libc.mmap(base + at * page, page, prot, mmap.MAP_SHARED | MAP_FIXED, fd,
                             onto * page)
            if got != base + at * page:
                raise OSError(ctypes.get_errno(), f"mmap alias of page {at}")
    finally:
        os.close(fd)  # the mapping keeps the file
    buf = (ctypes.c_char * nbytes).from_address(base)
    t = torch.frombuffer(buf, dtype=torch.int64)
    return Region([_chunk(t, width, 0)], width, torch.device("cpu"),
                  note=f"file-backed (tests only): {path}",
                  unmap=lambda: _libc.munmap(base, nbytes))


# --- patterns ----------------------------------------------------------------------------

@dataclass
class Pattern:
    """value[word] = scalar; or row[word % width] (+ offset[word // width] when given)."""

    name: str
    family: str
    scalar: int | None = None
    row: torch.Tensor | None = None
    offset: torch.Tensor | None = None   # per global row

    def expected(self, word: int, width: int) -> int:
        if self.scalar is not None:
            return u64(self.scalar)
        v = int(self.row[word % width])
        if self.offset is not None:
            v += int(self.offset[word // width])
        return u64(v)


def _random64(n: int, g: torch.Generator) -> torch.Tensor:
    hi = torch.randint(0, 1 << 32, (n,), generator=g, dtype=torch.int64)
    lo = torch.randint(0, 1 << 32, (n,), generator=g, dtype=torch.int64)
    return (hi << 32) | lo  # wraps into int64's sign bit as intended


def patterns(region: Region, seed: int) -> Iterator[Pattern]:
    """What memtests write: walking ones and zeros over the 64 bits of a word, the
    checkerboard and its inverse, each word's own index, seeded random data (last: the
    retention repeat re-reads it after a pause)."""
    w, dev = region.width, region.dev
    for bit in range(64):
        yield Pattern(f"walking ones, bit {bit}", "walking_ones", scalar=s64(1 << bit))
    for bit in range(64):
        yield Pattern(f"walking zeros, bit {bit}", "walking_zeros", scalar=s64(~(1 << bit)))
    for name, (a, b) in (("checkerboard", CHECKER), ("inverse checkerboard", CHECKER[::-1])):
        row = torch.tensor([s64(a), s64(b)], dtype=torch.int64).repeat((w + 1) // 2)[:w]
        yield Pattern(name, "checkerboard", row=row.to(dev))
    yield Pattern("address in address", "address",
                  row=torch.arange(w, dtype=torch.int64, device=dev),
                  offset=torch.arange(region.rows, dtype=torch.int64, device=dev) * w)
    g = torch.Generator().manual_seed(seed)
    yield Pattern(f"random (seed {seed})", "random", row=_random64(w, g).to(dev),
                  offset=_random64(region.rows, g).to(dev))


# --- write, compare, localise ------------------------------------------------------------

class Tester:
    """Writes patterns into a region and compares them on the device."""

    def __init__(self, region: Region, slice_bytes: int):
        self.region = region
        self.slice_rows = max(1, slice_bytes // (region.width * WORD))
        rows = min(self.slice_rows, max((c.rows.shape[0] for c in region.chunks), default=1))
        self.scratch = torch.empty(rows, region.width, dtype=torch.int64, device=region.dev)

    def slices(self) -> Iterator[tuple[Chunk, int, int]]:
        for c in self.region.chunks:
            for lo in range(0, c.rows.shape[0], self.slice_rows):
                yield c, lo, min(c.rows.shape[0], lo + self.slice_rows)

    def write(self, p: Pattern) -> None:
        for c in self.region.chunks:
            if p.scalar is not None:
                c.rows.fill_(p.scalar)
            elif p.offset is None:
                c.rows.copy_(p.row.expand_as(c.rows))
            else:
                n = c.rows.shape[0]
                torch.add(p.offset[c.first_row:c.first_row + n, None], p.row, out=c.rows)

    def _expected(self, p: Pattern, c: Chunk, lo: int, hi: int):
        if p.scalar is not None:
            return p.scalar
        if p.offset is None:
            return p.row
        first = c.first_row + lo
        return torch.add(p.offset[first:first + hi - lo, None], p.row,
                         out=self.scratch[:hi - lo])

    def verify(self, p: Pattern) -> list[int]:
        """Mismatched words per slice (slices() order); one host synchronisation."""
        counts = [torch.count_nonzero(torch.ne(c.rows[lo:hi], self._expected(p, c, lo, hi)))
                  for c, lo, hi in self.slices()]
        return torch.stack(counts).tolist() if counts else []

    def localise(self, p: Pattern, counts: list[int], limit: int) -> list[dict]:
        """Where the slices that counted mismatches are wrong, read again: at most `limit`
        words. A word that reads right again (a transient) is counted, not described."""
        out: list[dict] = []
        width = self.region.width
        for (c, lo, hi), bad in zip(self.slices(), counts, strict=True):
            if not bad or len(out) >= limit:
                continue
            part = c.rows[lo:hi]
            wrong = torch.ne(part, self._expected(p, c, lo, hi)).nonzero()[:limit - len(out)]
            for r, j in wrong.tolist():
                word = (c.first_row + lo + r) * width + j
                found = u64(int(part[r, j]))
                expected = p.expected(word, width)
                flipped = found ^ expected
                ex = {"pattern": p.name, "offset": word * WORD,
                      "address": hex(c.address + ((lo + r) * width + j) * WORD),
                      "expected": f"{expected:#018x}", "found": f"{found:#018x}",
                      "bits": [b for b in range(64) if flipped >> b & 1]}
                if p.family == "address" and found < self.region.words and found != word:
                    ex["holds_index_of_offset"] = found * WORD  # an address alias
                out.append(ex)
        return out
