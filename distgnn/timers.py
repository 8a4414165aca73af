"""Wall-clock accumulators for the parts of an epoch, and counts of the rows the aggregation
touches."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator

#: what :meth:`Timers.rows` counts: rows the aggregation kernel writes (forward and transposed),
#: table rows the exchange sets to zero, and rows it copies (into and out of tables, around
#: messages) -- per rank, floats of one row each (docs/design.md#metrics-keys)
ROW_KINDS = ("written", "zeroed", "copied")


class Timers:
    """Seconds spent per named part (``aggregate``, ``exchange_wait``, ``allreduce``...), and
    the rows touched per :data:`ROW_KINDS`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.row_counts: dict[str, int] = defaultdict(int)
        #: the part being timed now ('' outside every part): what the hang watchdog reports
        self.current = ""

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        outer, self.current = self.current, name
        try:
            yield
        finally:
            self.current = outer
            self.seconds[name] += time.perf_counter() - start

    def rows(self, kind: str, n: int) -> None:
        """Count ``n`` rows of ``kind`` (one of :data:`ROW_KINDS`)."""
        self.row_counts[kind] += int(n)

    def reset(self) -> dict[str, float]:
        """Return the seconds so far and start again from zero (row counts too)."""
        out = dict(self.seconds)
        self.seconds.clear()
        self.row_counts.clear()
        return out
