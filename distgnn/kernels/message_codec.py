"""Training rows in fewer bytes on the wire: ``--message-precision`` (docs/design.md#message-precision).

A :class:`MessageCodec` turns float32 rows [N, F] into what travels and back:

* ``fp32``: the rows themselves (4 F bytes a row);
* ``bf16``: bfloat16, rounded to nearest even (2 F bytes);
* ``int8``, ``int4``, ``int2``: per group of ``group`` columns (0: the whole row) a float32 scale
  and low value, then one code of that many bits per column, packed, the row padded to 4 bytes
  (native/include/distgnn/quantize.hpp states the layout and the error bounds). Rounding is to
  nearest, or stochastic (unbiased, keyed by ``key``: a rerun draws the same) where the caller
  says a bias would accumulate.

Packing and unpacking run in the native module with the aggregation kernels' instruction set.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from distgnn import _native
from distgnn.vocabulary import MESSAGE_BITS, message_row_bytes

_MASK = (1 << 64) - 1
#: keeps the rounding stream apart from dropout's (both hash the run's seed)
STREAM_SALT = 0x5f3759df0badc0de


def mix(z: int) -> int:
    """SplitMix64's finaliser on a 64-bit integer (native/include/distgnn/dropout.hpp's ``mix``)."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def stream_key(seed: int, epoch: int, count: int, rank: int = 0) -> int:
    """The rounding key of rank ``rank``'s ``count``-th encoded exchange of ``epoch`` in a run
    seeded ``seed``: the same in a rerun and after a resume, different on every rank (so the
    partials a root sums round independently)."""
    key = mix((seed ^ STREAM_SALT) & _MASK)
    for part in (epoch, count, rank):
        key = mix((key + part) & _MASK)
    return key


@dataclass(frozen=True)
class MessageCodec:
    """How training rows travel: ``precision`` (fp32, bf16, int8, int4, int2) and, for the
    integer widths, ``group`` columns per scale (0: one scale per row)."""

    precision: str = "fp32"
    group: int = 0
    threads: int = 0

    @property
    def bits(self) -> int | None:
        """Code bits of an integer width; None for fp32 and bf16."""
        return MESSAGE_BITS.get(self.precision)

    @property
    def changes_rows(self) -> bool:
        return self.precision != "fp32"

    def row_bytes(self, width: int) -> int:
        """Bytes one row of ``width`` float32 columns takes on the wire (scales and padding
        included)."""
        return message_row_bytes(width, self.precision, self.group)

    def encode(self, rows: torch.Tensor, stochastic: bool = False, key: int = 0,
               ids: torch.Tensor | None = None) -> torch.Tensor:
        """rows [N, F] (float) -> the wire form: float32 [N, F], bfloat16 [N, F] or uint8
        [N, row_bytes(F)]. With ``ids`` (int64 [M]) the rows encoded are ``rows[ids]`` ([M, F]);
        the integer widths read them in place (the gather fused into the encode), with the bytes
        of encoding ``rows[ids]``."""
        if self.bits is None:
            rows = rows if ids is None else rows[ids]
            return rows if self.precision == "fp32" else rows.to(torch.bfloat16)
        if ids is not None and (rows.dtype != torch.float32 or not rows.is_contiguous()):
            rows, ids = rows[ids], None   # gather first rather than convert the whole table
        rows = rows.detach().to(torch.float32).contiguous()
        width = rows.shape[1]
        if ids is not None:
            ids = ids.to(torch.int64).contiguous()
        packed = torch.empty((rows.shape[0] if ids is None else ids.shape[0], self.row_bytes(width)),
                             dtype=torch.uint8)
        if packed.shape[0]:
            _native.quantize_encode(rows, packed, self.bits, self.group, stochastic, key & _MASK,
                                    self.threads, ids)
        return packed

    def decode_into(self, wire: torch.Tensor, table: torch.Tensor, ids: torch.Tensor,
                    add: bool = False) -> None:
        """Rows ``decode(wire)`` land in ``table`` [rows, F] at ``ids`` (int64 [N]): added in the
        order of ``ids`` (as ``table.index_add_``) with ``add``, else assigned (``ids``
        distinct, as ``table[ids] = rows``). An integer width decodes each row straight into
        its place, with the bits of decoding first."""
        if self.bits is not None and table.dtype == torch.float32 and table.is_contiguous():
            if wire.shape[0]:
                _native.quantize_decode(wire.contiguous(), table, self.bits, self.group,
                                        self.threads, ids.to(torch.int64).contiguous(), add)
            return
        rows = self.decode(wire, table.shape[1], table.dtype)
        if add:
            table.index_add_(0, ids, rows)
        else:
            table[ids] = rows

    def decode(self, wire: torch.Tensor, width: int, dtype: torch.dtype = torch.float32,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """The wire form of rows of ``width`` columns -> rows [N, width] in ``dtype`` (integer
        widths: into ``out``, float32 [N, width], when given)."""
        if self.bits is None:
            return wire if wire.dtype == dtype else wire.to(dtype)
        if out is None:
            out = torch.empty((wire.shape[0], width), dtype=torch.float32)
        if wire.shape[0]:
            _native.quantize_decode(wire.contiguous(), out, self.bits, self.group, self.threads)
        return out if dtype == torch.float32 else out.to(dtype)
