"""Process-level memory settings for streaming work."""
from __future__ import annotations

import ctypes
import ctypes.util

_M_MMAP_THRESHOLD = -3  # mallopt parameter number in glibc's malloc.h


def fix_mmap_threshold(threshold_bytes: int = 1 << 20) -> bool:
    """Serve allocations above ``threshold_bytes`` from mmap, always.

    glibc raises its mmap threshold each time a large block is freed, after which blocks of that
    size come from the heap, where streaming code that allocates and frees one block per chunk
    leaves freed blocks resident. Fixing the threshold returns every large block to the OS on
    free. Returns False where this is not glibc.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold_bytes)))
    except (OSError, AttributeError):
        return False
