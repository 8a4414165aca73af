"""Reused output buffers for the native kernels (docs/design.md#output-buffers).

A large tensor that torch allocates comes from a fresh anonymous mapping (glibc serves every block
over 32 MB that way, and ``distgnn`` lowers that bound to 1 MB), so the kernel that first writes
it takes a page fault and a page of zeroes from the OS for every 4 KB, a large share of an
aggregation's time on a multi-GB output (bench/README.md, "Aggregation kernel"). Training asks
for outputs of the same sizes every epoch, so :class:`OutputPool` keeps the memory of an output
once nothing uses it any more and hands it out again, already mapped, for the next request of
that size.

An output is a tensor over a numpy view of a pooled block; the tensor's storage holds the view,
so the block is free exactly when the view dies (a weak reference tells), whatever views of the
tensor were taken meanwhile. Free blocks are kept up to ``max_idle_bytes`` together, the longest
unused released first. Blocks stay on ordinary pages: an output is written row after row, so its
translations are cheap (a reused output on 2 MB pages was no faster: bench/README.md), while a
fresh 2 MB page costs a compaction under THP ``defrag=madvise``.
"""
from __future__ import annotations

import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from distgnn.host_memory import proc_kib_field


#: dtypes an output may have, as numpy views a block (bfloat16: its bits as int16)
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.bfloat16: np.int16}
#: environment variable that turns reuse off (``0``) for a process
REUSE_ENV = "DISTGNN_REUSE_OUTPUTS"


@dataclass
class _Block:
    memory: np.ndarray                               #: uint8 [nbytes]
    user: Optional[weakref.ReferenceType] = None     #: the view handed out; dead when free
    handed_out: int = 0                              #: the request that last took it

    def free(self) -> bool:
        return self.user is None or self.user() is None


@dataclass
class OutputPool:
    """Buffers of at least ``min_bytes`` reused across requests of the same size (module
    docstring); smaller requests, and other dtypes, get ``torch.empty``."""

    max_idle_bytes: int
    min_bytes: int = 4 << 20
    enabled: bool = True
    _blocks: dict[int, list[_Block]] = field(default_factory=dict)
    _requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised contiguous tensor of ``shape`` and ``dtype``."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not self.enabled or dtype not in _NUMPY or nbytes < self.min_bytes:
            return torch.empty(shape, dtype=dtype)
        with self._lock:
            self._requests += 1
            block = next((b for b in self._blocks.get(nbytes, ()) if b.free()), None)
            if block is None:
                self._trim(self.max_idle_bytes - nbytes)
                block = _Block(torch.empty(nbytes, dtype=torch.uint8).numpy())
                self._blocks.setdefault(nbytes, []).append(block)
            view = block.memory.view(_NUMPY[dtype]).reshape(shape)
            block.user, block.handed_out = weakref.ref(view), self._requests
        out = torch.from_numpy(view)
        return out.view(dtype) if out.dtype != dtype else out

    def idle_bytes(self) -> int:
        """Bytes of the blocks nothing uses now."""
        return self._bytes(free_only=True)

    def held_bytes(self) -> int:
        """Bytes of every block, used or free."""
        return self._bytes(free_only=False)

    def _bytes(self, free_only: bool) -> int:
        with self._lock:
            return sum(n for n, bs in self._blocks.items() for b in bs if b.free() or not free_only)

    def release(self) -> None:
        """Give the memory of every free block back (used blocks are dropped from the pool and
        freed when their tensors die)."""
        with self._lock:
            self._blocks.clear()

    def _trim(self, budget: int) -> None:
        """Release free blocks, the longest unused first, until at most ``budget`` bytes of free
        blocks remain."""
        free = sorted(((n, b) for n, bs in self._blocks.items() for b in bs if b.free()),
                      key=lambda nb: nb[1].handed_out)
        idle = sum(n for n, _ in free)
        for n, b in free:
            if idle <= max(budget, 0):
                break
            self._blocks[n].remove(b)
            idle -= n
        self._blocks = {n: bs for n, bs in self._blocks.items() if bs}


#: the pool the aggregation, attention and dropout kernels draw their large outputs from: free
#: blocks up to an eighth of the machine's memory (4 GiB where unknown); ``DISTGNN_REUSE_OUTPUTS=0``
#: turns it off
POOL = OutputPool(max_idle_bytes=(proc_kib_field("/proc/meminfo", "MemTotal") or 32 << 30) // 8,
                  enabled=os.environ.get(REUSE_ENV, "1") != "0")


def pooled_copy(x: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``x`` (same shape and dtype) in a pooled block: a clone without a
    fresh mapping's page faults where ``x`` is large."""
    return POOL.empty(tuple(x.shape), x.dtype).copy_(x)


def pooled_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zeroed contiguous tensor of ``shape`` and ``dtype`` in a pooled block."""
    return POOL.empty(shape, dtype).zero_()


def reuse_outputs(enabled: bool = True) -> None:
    """Turn the reuse of kernel outputs on or off for this process (off releases the free
    blocks)."""
    POOL.enabled = bool(enabled)
    if not enabled:
        POOL.release()
