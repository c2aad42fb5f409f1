"""Direct I/O done the way fio does it: files laid out before the clock starts, and
buffers that reach the device whole. Runs ON a node (the storage probe's); standard
library only, imports nothing of burnin."""

from __future__ import annotations

import ctypes
import mmap

HUGE_PAGE = 2 << 20


def preallocate(fd: int, size: int) -> bool:
    """Reserve the file's blocks before the clock starts, as fio lays out its files
    (fallocate=native: fallocate(2), and nothing where the file system cannot). Writes
    into allocated blocks run in parallel on ext4 and XFS; writes that extend a file each
    take its inode lock, one at a time, and allocate blocks as they go."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
        return libc.fallocate(fd, 0, 0, size) == 0
    except (OSError, AttributeError):
        return False


def io_buffers(count: int, size: int) -> tuple[list[memoryview], bool]:
    """`count` buffers of `size` bytes for O_DIRECT, in one private mapping aligned to 2 MiB
    and backed by transparent huge pages where the kernel gives them ((views, asked)).
    A request's buffer is then a few physically contiguous pieces and reaches the device
    whole; on 4 KiB pages it is hundreds of pieces, and a device with a segment limit
    (virtio-blk: 254) receives it split into requests of 1 MiB or less."""
    m = mmap.mmap(-1, count * size + HUGE_PAGE, flags=mmap.MAP_PRIVATE)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
        huge = True
    except (AttributeError, OSError):
        huge = False
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    skip = -base % HUGE_PAGE
    view = memoryview(m)
    return [view[skip + k * size: skip + (k + 1) * size] for k in range(count)], huge
