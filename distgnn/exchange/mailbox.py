"""In-flight payloads of a delayed exchange: posted at one step, taken r steps later.

cd-r posts non-blocking row exchanges (:meth:`distgnn.comm.Communicator.exchange_rows_async`)
and consumes each one a fixed number of steps after it was posted. A :class:`Mailbox` keeps them
by *channel* (which message: the roots' copies, the leaves' partials, their delayed gradients,
...) and by the step that posted them. Before a checkpoint (or MPI finalize) :meth:`Mailbox.drain`
waits for everything in flight; a checkpoint stores the received rows and a restored mailbox hands
them out as if they had just arrived.
"""
from __future__ import annotations

from typing import Iterable, Protocol

import torch


class Message(Protocol):
    """Anything with ``wait() -> rows``: a posted exchange, or rows already received."""

    def wait(self) -> torch.Tensor: ...


class Received:
    """Rows already here (drained, or restored from a checkpoint): :meth:`wait` returns at once."""

    def __init__(self, rows: torch.Tensor):
        self.rows = rows

    def wait(self) -> torch.Tensor:
        return self.rows


class Mailbox:
    """One layer's messages in flight, ``channel -> {step posted: message}``."""

    def __init__(self, channels: Iterable[str]):
        self._slots: dict[str, dict[int, Message]] = {name: {} for name in channels}

    def post(self, channel: str, step: int, message: Message) -> None:
        """Keep ``message``, posted at ``step``, until it is taken."""
        self._slots.setdefault(channel, {})[step] = message

    def take(self, channel: str, step: int) -> torch.Tensor:
        """The rows of the message posted at ``step`` (waits for it); it leaves the mailbox."""
        return self._slots[channel].pop(step).wait()

    def holds(self, channel: str, step: int) -> bool:
        return step in self._slots.get(channel, {})

    def drain(self) -> None:
        """Wait for every message in flight, keeping its rows as :class:`Received`."""
        for slot in self._slots.values():
            for step, message in list(slot.items()):
                slot[step] = Received(message.wait())

    def state_dict(self) -> dict[str, dict[int, torch.Tensor]]:
        """``channel -> {step: rows}`` (drains first)."""
        self.drain()
        return {name: {step: m.wait() for step, m in slot.items()}
                for name, slot in self._slots.items()}

    @classmethod
    def from_state(cls, state: dict[str, dict[int, torch.Tensor]]) -> "Mailbox":
        box = cls(state)
        for name, slot in state.items():
            box._slots[name] = {int(step): Received(rows) for step, rows in slot.items()}
        return box
