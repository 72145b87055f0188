"""How the C library's allocator keeps the memory a capture frees, so that a gigabyte of rows is not faulted
in page by page.

Strategy: a capture hands its file blocks of hundreds of kilobytes to megabytes (a snapshot record's rows
joined, a backfill chunk's rows, a write batch), each freed once written.  glibc's malloc serves a block
above its mmap threshold with a fresh mapping, and gives the top of its heap back to the system above its
trim threshold; it raises both as it sees large blocks freed, so where they stand depends on what the
process happened to free before, and the same capture could fault every page of every block in anew (one
fault per 4 KiB written) or reuse them.  :func:`keep_freed_memory` fixes both (:data:`MMAP_ABOVE`,
:data:`TRIM_ABOVE`): blocks below 32 MiB come from the heap and are reused, and freed memory stays with the
process up to its peak.  It is a setting of the whole process, made by the ``capture`` command; with another
C library it does nothing.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["MMAP_ABOVE", "TRIM_ABOVE", "keep_freed_memory"]

#: glibc's ``mallopt`` parameters (``malloc.h``) and the values set.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_ABOVE = 32 << 20  # (glibc's own ceiling for the threshold it raises)
TRIM_ABOVE = 256 << 20


def keep_freed_memory() -> bool:
    """Fix glibc malloc's mmap and trim thresholds for this process; whether it did (``False``: not glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):  # (musl's mallopt does nothing)
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_ABOVE)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_ABOVE))
