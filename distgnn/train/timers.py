"""Wall-clock accumulators for the parts of an epoch."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator


class Timers:
    """Seconds spent per named part (``aggregate``, ``exchange_wait``, ``allreduce``...)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
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

    def reset(self) -> dict[str, float]:
        """Return the totals so far and start again from zero."""
        out = dict(self.seconds)
        self.seconds.clear()
        return out
