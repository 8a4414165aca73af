"""Process memory helpers (distgnn/host_memory.py): 2 MB-page buffers and the reports about them."""
from __future__ import annotations

import numpy as np
import pytest

from distgnn import host_memory as memory


def test_huge_page_array_is_aligned_usable_and_falls_back_when_small() -> None:
    big = memory.huge_page_array((3_000_000,), np.float32)  # 12 MB
    assert big.shape == (3_000_000,) and big.dtype == np.float32 and big.flags.writeable
    big[:] = np.arange(big.size, dtype=np.float32)
    assert big[-1] == big.size - 1
    if memory.thp_mode() in ("madvise", "always"):
        assert big.ctypes.data % memory.HUGE_PAGE_BYTES == 0
    small = memory.huge_page_array((10, 3), np.int64)
    assert small.shape == (10, 3) and small.base is None  # an ordinary np.empty
    copy = memory.huge_page_copy(big.reshape(1000, 3000))
    assert np.array_equal(copy, big.reshape(1000, 3000)) and copy.ctypes.data != big.ctypes.data


def test_thp_mode(tmp_path, monkeypatch) -> None:
    assert memory.thp_mode() in ("always", "madvise", "never", "unavailable")
    fake = tmp_path / "enabled"
    fake.write_text("always madvise [never]\n")
    monkeypatch.setattr(memory, "_THP_ENABLED", str(fake))
    assert memory.thp_mode() == "never"
    assert memory.huge_page_array((2_000_000,), np.float64).base is None  # refused: np.empty
    monkeypatch.setattr(memory, "_THP_ENABLED", str(tmp_path / "missing"))
    assert memory.thp_mode() == "unavailable"


def test_huge_page_bytes_reads_anon_huge_pages_in_bytes(tmp_path, monkeypatch) -> None:
    """AnonHugePages of smaps_rollup, counted in kB there, in bytes here; None without the line or
    the file."""
    huge_kib, rss_kib = 6144, 2 * 6144 + 4  # distinct, so a wrong field shows
    fake = tmp_path / "smaps_rollup"
    fake.write_text(f"Rss:           {rss_kib} kB\nAnonHugePages: {huge_kib} kB\n"
                    f"ShmemPmdMapped: 0 kB\n")
    monkeypatch.setattr(memory, "_SMAPS_ROLLUP", str(fake))
    assert memory.huge_page_bytes() == huge_kib * 1024
    fake.write_text(f"Rss:           {rss_kib} kB\n")
    assert memory.huge_page_bytes() is None
    monkeypatch.setattr(memory, "_SMAPS_ROLLUP", str(tmp_path / "missing"))
    assert memory.huge_page_bytes() is None


@pytest.mark.skipif(memory.thp_mode() not in ("madvise", "always"), reason="THP off on this host")
def test_touched_huge_page_array_is_on_huge_pages() -> None:
    before = memory.huge_page_bytes() or 0
    block = memory.huge_page_array((16 << 20,), np.uint8)
    block[::4096] = 1  # touch every page
    assert (memory.huge_page_bytes() or 0) >= before + (2 << 20)
