"""Source tiling of the aggregation kernel, chosen by measurement once per graph and row width.

The kernel can sweep its sources one tile at a time, all threads on the same tile, so that a
tile's rows are gathered from the last-level cache instead of memory
(native/include/distgnn/aggregate.hpp). Whether that pays depends on the cache a process really
gets, which sysfs does not tell a virtual machine's tenant, and on the graph: each extra tile
re-reads and rewrites the whole output, so a low-degree graph loses (docs/design.md#source-tiling).
So, in the default mode ``auto``, the first calls on a graph run the untiled kernel and a few
tile counts in turn, and every later call uses the fastest (untiled unless a tile count
wins by more than :data:`MARGIN`). The trial calls are real calls:
their results are used, and for float32 rows of 256 columns every candidate gives the same bits
on every instruction set; for narrower rows the sums differ by rounding only.

``DISTGNN_TILES`` (or :func:`set_mode`): ``auto`` (default), ``off`` (never tile), or a tile count
used whenever a graph's rows ascend.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from distgnn.errors import DistgnnError

MODE_ENV = "DISTGNN_TILES"
#: a source table (n_src rows of one call's width) smaller than this is never tiled: it already
#: fits the cache a tenant gets on every machine measured (bench/README.md, gather-rate tables)
MIN_TABLE_BYTES = 32 << 20
#: the tile sizes tried: a table of B bytes is cut into ceil(B / size) tiles
TILE_BYTES = (64 << 20, 32 << 20)
#: a tile count above mean degree / this is not tried: each tile re-reads and rewrites the output
#: ([n_dst, F] twice), which would then cost over a quarter of the gathers it could save
EDGES_PER_OUTPUT_PASS = 8
#: each candidate is timed this many times, interleaved; the minimum counts (the first call on a
#: new output also pays its page faults)
ROUNDS = 2
#: a tile count is kept only if its fastest trial beats the untiled one by this fraction: within
#: a shared machine's noise the untiled kernel, whose sums never depend on the measurement, stays
MARGIN = 0.03

_mode: str | int = "auto"


def parse_mode(value: str, source: str) -> str | int:
    """``auto``, ``off`` or a tile count (0 and 1 are ``off``); one-line :class:`DistgnnError`
    naming ``source`` otherwise."""
    text = value.strip().lower()
    if text in ("auto", "off"):
        return text
    if text.isdigit() and int(text) >= 0:
        return "off" if int(text) <= 1 else int(text)
    raise DistgnnError(f"{source}: expected auto, off or a tile count, got {value!r}")


def set_mode(mode: str | int) -> str | int:
    """Set how tile counts are chosen from now on (see the module text); returns the mode. Graphs
    already measured keep their choice under ``auto``."""
    global _mode
    _mode = parse_mode(str(mode), "set_mode")
    return _mode


def mode() -> str | int:
    """The current mode: ``auto``, ``off`` or a fixed tile count."""
    return _mode


def candidates(n_dst: int, n_src: int, n_edges: int, row_bytes: int) -> Tuple[int, ...]:
    """Tile counts worth timing for a CSR with ``n_dst`` rows and ``n_edges`` edges over
    ``n_src`` sources of ``row_bytes`` bytes each; (1,) when none is (untiled only)."""
    table = n_src * row_bytes
    if table < MIN_TABLE_BYTES or n_dst <= 0:
        return (1,)
    most = n_edges / n_dst / EDGES_PER_OUTPUT_PASS
    counts = sorted({math.ceil(table / size) for size in TILE_BYTES})
    return (1, *(t for t in counts if 2 <= t <= most))


@dataclass
class TileChoice:
    """The measurement of one (graph, width, row dtype, threads): which tile count each call uses."""

    options: Tuple[int, ...]
    times: Dict[int, List[float]] = field(default_factory=dict)
    chosen: Optional[int] = None

    def __post_init__(self) -> None:
        if len(self.options) == 1:
            self.chosen = self.options[0]

    def next(self) -> int:
        """The tile count for the next call: the chosen one, or the next candidate to time."""
        if self.chosen is not None:
            return self.chosen
        done = sum(len(v) for v in self.times.values())
        return self.options[done % len(self.options)]

    def record(self, tiles: int, seconds: float) -> None:
        """Record one trial call's wall time; after :data:`ROUNDS` of every candidate, choose."""
        if self.chosen is not None:
            return
        self.times.setdefault(tiles, []).append(seconds)
        if all(len(self.times.get(t, ())) >= ROUNDS for t in self.options):
            self.chosen = min(self.options,
                              key=lambda t: (min(self.times[t]) * (1.0 if t == 1 else 1.0 + MARGIN), t))

    def report(self) -> Dict[str, Any]:
        """What was measured, for a run's summary: tile count -> fastest trial in ms."""
        return {"tiles": self.chosen,
                "trial_ms": {str(t): round(min(v) * 1e3, 1) for t, v in sorted(self.times.items())}}


def fixed(sorted_rows: bool) -> Optional[int]:
    """The tile count when the mode fixes one (``off``: 1; N: N where rows ascend, else 1); None
    under ``auto``."""
    if _mode == "auto":
        return None
    if _mode == "off" or not sorted_rows:
        return 1
    return int(_mode)


if os.environ.get(MODE_ENV):
    _mode = parse_mode(os.environ[MODE_ENV], MODE_ENV)
