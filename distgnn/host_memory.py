"""Process-level memory settings for streaming work, and how much memory this process may use."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

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


#: transparent huge page size on x86-64 and most arm64 kernels
HUGE_PAGE_BYTES = 2 << 20
#: below this, a buffer stays on ordinary pages (a huge page would be mostly empty)
HUGE_PAGE_MIN_BYTES = 4 << 20
_THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
_SMAPS_ROLLUP = "/proc/self/smaps_rollup"


def thp_mode() -> str:
    """The kernel's transparent huge page mode: ``always``, ``madvise``, ``never``, or
    ``unavailable`` (no THP support, or not Linux)."""
    try:
        text = open(_THP_ENABLED).read()
    except OSError:
        return "unavailable"
    chosen = [w.strip("[]") for w in text.split() if w.startswith("[")]
    return chosen[0] if chosen else "unavailable"


def huge_page_array(shape: tuple[int, ...], dtype) -> "np.ndarray":
    """An uninitialised numpy array whose memory the kernel is asked to back with 2 MB pages.

    An anonymous mapping rounded up to whole huge pages, started on a 2 MB boundary, marked
    ``MADV_HUGEPAGE`` (honoured under THP ``madvise`` and ``always``). Falls back to ordinary
    pages (``np.empty``) for small buffers, or where the mapping or the advice is refused. The
    mapping lives as long as the array (and any tensor made from it with ``torch.from_numpy``)."""
    import mmap

    import numpy as np

    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < HUGE_PAGE_MIN_BYTES or thp_mode() not in ("madvise", "always") \
            or not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.empty(shape, dtype=dtype)
    size = -(-nbytes // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES + HUGE_PAGE_BYTES
    try:
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError:
        return np.empty(shape, dtype=dtype)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    offset = (-base) % HUGE_PAGE_BYTES
    try:
        region.madvise(mmap.MADV_HUGEPAGE, offset, size - HUGE_PAGE_BYTES)
    except OSError:
        pass  # ordinary pages, still correct
    return np.frombuffer(region, dtype=dtype, count=nbytes // dtype.itemsize,
                         offset=offset).reshape(shape)


def huge_page_copy(array: "np.ndarray") -> "np.ndarray":
    """``array``'s contents in a :func:`huge_page_array` (the array itself when it is small)."""
    if array.nbytes < HUGE_PAGE_MIN_BYTES:
        return array
    out = huge_page_array(array.shape, array.dtype)
    out[...] = array
    return out


def huge_page_bytes() -> int | None:
    """Bytes of this process's anonymous memory on huge pages now (AnonHugePages of
    /proc/self/smaps_rollup), or None where the kernel does not say."""
    return proc_kib_field(_SMAPS_ROLLUP, "AnonHugePages")


def proc_kib_field(path: str, field: str) -> int | None:
    """The ``field:`` line of a /proc file that counts in kB (``/proc/meminfo``,
    ``/proc/self/smaps_rollup``), in bytes; None where the file or the line is missing."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cgroup_memory_left(proc_cgroup: str = "/proc/self/cgroup",
                       root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process's cgroup (v2) and its ancestors still allow: the least of
    ``memory.max - memory.current`` from its own folder up to the root; None without a limit
    (``max`` everywhere, or no cgroup v2 mount)."""
    try:
        line = next(l for l in Path(proc_cgroup).read_text().splitlines() if l.startswith("0::"))
    except (OSError, StopIteration):
        return None
    folder = Path(root) / line[3:].strip().lstrip("/")
    least = None
    for here in [folder, *folder.parents]:
        if Path(root) not in (here, *here.parents):
            break  # above the cgroup mount
        try:
            limit = (here / "memory.max").read_text().strip()
            used = int((here / "memory.current").read_text().strip())
        except (OSError, ValueError):
            continue
        if limit != "max":
            left = max(int(limit) - used, 0)
            least = left if least is None else min(least, left)
    return least


def slurm_memory_bytes(env: dict[str, str] | None = None) -> int | None:
    """What a Slurm job may use on this node, bytes: ``--mem`` (SLURM_MEM_PER_NODE, MiB), or
    ``--mem-per-cpu`` times the job's cpus here (SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE); None
    outside Slurm or without a memory request."""
    env = os.environ if env is None else env
    per_node, per_cpu = env.get("SLURM_MEM_PER_NODE", ""), env.get("SLURM_MEM_PER_CPU", "")
    if per_node.isdigit() and int(per_node) > 0:
        return int(per_node) << 20
    cpus = env.get("SLURM_CPUS_ON_NODE", "")
    if per_cpu.isdigit() and cpus.isdigit() and int(per_cpu) > 0:
        return int(per_cpu) * int(cpus) << 20
    return None


def memory_budget(meminfo: str = "/proc/meminfo", proc_cgroup: str = "/proc/self/cgroup",
                  cgroup_root: str = "/sys/fs/cgroup", env: dict[str, str] | None = None
                  ) -> tuple[int, str]:
    """(bytes, what sets them) this machine's ranks may use: the least of the node's
    MemAvailable, the cgroup's limit less its use, and the Slurm job's memory request; (0, '')
    where none is known. On a cluster the job's own limit, not the node's free memory, is what a
    rank is killed for exceeding."""
    found = [(proc_kib_field(meminfo, "MemAvailable"), "the node's MemAvailable"),
             (cgroup_memory_left(proc_cgroup, cgroup_root), "the cgroup's memory.max less its use"),
             (slurm_memory_bytes(env), "the Slurm job's memory request")]
    known = [(b, what) for b, what in found if b]
    return min(known) if known else (0, "")
