"""The wire codec (distgnn/kernels/message_codec.py, native/include/distgnn/quantize.hpp) against a
plain torch reference: the layout, the byte count, the hand-derived error bounds, unbiased
stochastic rounding and keyed draws, on every instruction set this host runs."""
from __future__ import annotations

import math

import pytest
import torch

from distgnn import _native
from distgnn.kernels import ops
from distgnn.kernels.message_codec import MessageCodec, stream_key
from distgnn.vocabulary import MESSAGE_BITS

WIDTHS = tuple(MESSAGE_BITS)


@pytest.fixture(params=ops.supported_isas())
def isa(request):
    ops.set_isa(request.param)
    yield request.param
    ops.set_isa("host")


def group_spans(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per column, the low value and the span (max - min) of its group: [N, F] each."""
    n, f = x.shape
    g = f if group <= 0 or group >= f else group
    lo, span = torch.empty_like(x), torch.empty_like(x)
    for c0 in range(0, f, g):
        block = x[:, c0:c0 + g]
        lo[:, c0:c0 + g] = block.min(1, keepdim=True).values
        span[:, c0:c0 + g] = block.max(1, keepdim=True).values - block.min(1, keepdim=True).values
    return lo, span


def reference_decode(packed: torch.Tensor, width: int, bits: int, group: int) -> torch.Tensor:
    """The documented layout read with plain torch: per group a float32 (scale, low), then the
    codes, ``8 / bits`` to a byte, the first in the low bits."""
    n = packed.shape[0]
    g = width if group <= 0 or group >= width else group
    n_groups = math.ceil(width / g)
    header = packed[:, :8 * n_groups].contiguous().view(torch.float32).reshape(n, n_groups, 2)
    body = packed[:, 8 * n_groups:].to(torch.int64)
    per = 8 // bits
    codes = torch.stack([(body >> (bits * j)) & ((1 << bits) - 1) for j in range(per)], 2)
    codes = codes.reshape(n, -1)[:, :width].to(torch.float32)
    group_of = torch.arange(width) // g
    return header[:, group_of, 1] + codes * header[:, group_of, 0]


@pytest.mark.parametrize("precision", WIDTHS)
@pytest.mark.parametrize("width,group", [(256, 0), (172, 0), (37, 0), (256, 64), (100, 32), (3, 0)])
def test_round_trip_within_the_bound_and_the_layout_as_documented(isa, precision, width, group):
    torch.manual_seed(width + group)
    x = torch.randn(300, width) * torch.rand(300, 1) * 5 + torch.randn(300, 1)
    codec = MessageCodec(precision, group)
    bits = MESSAGE_BITS[precision]
    levels = (1 << bits) - 1
    lo, span = group_spans(x, group)
    step = span / levels
    for stochastic, bound in ((False, 0.5), (True, 1.0)):
        packed = codec.encode(x, stochastic=stochastic, key=7)
        n_groups = math.ceil(width / (width if group in (0,) or group >= width else group))
        assert packed.dtype == torch.uint8
        assert packed.shape == (300, codec.row_bytes(width))
        assert codec.row_bytes(width) == math.ceil((8 * n_groups + math.ceil(width * bits / 8)) / 4) * 4
        assert codec.row_bytes(width) == _native.quantize_row_bytes(width, bits, group)
        y = codec.decode(packed, width)
        # the same values, to the last bit or two: AVX2 and AVX-512 fuse low + code * scale
        ulps = 2.0 ** -22 * (lo.abs() + span)
        assert bool(((y - reference_decode(packed, width, bits, group)).abs() <= ulps).all())
        err = (y - x).abs()
        # the float32 arithmetic of low + code * scale adds a few ulps of the group's magnitude
        slack = 4e-7 * (lo.abs() + span) + 1e-30
        assert bool((err <= bound * step + slack).all()), (stochastic, float((err / step).max()))
        assert float((err / (step + 1e-30)).max()) > 0.2 * bound  # the rounding is really that coarse


@pytest.mark.parametrize("precision", WIDTHS)
def test_stochastic_rounding_is_unbiased_and_nearest_is_not(isa, precision):
    """A row whose values sit 0.3 of a step above a level: nearest always rounds them down (bias
    -0.3 step); the mean over many keyed draws of stochastic rounding lies within five standard
    errors of the value."""
    bits = MESSAGE_BITS[precision]
    levels = (1 << bits) - 1
    width = 64
    x = torch.zeros(1, width)
    x[0, 0], x[0, 1] = 0.0, float(levels)   # low 0, step 1
    x[0, 2:] = torch.arange(width - 2) % levels + 0.3
    codec = MessageCodec(precision)
    draws = 4000
    total = torch.zeros(width, dtype=torch.float64)
    for key in range(draws):
        total += codec.decode(codec.encode(x, stochastic=True, key=stream_key(0, 0, key)), width)[0].double()
    bias = total / draws - x[0].double()
    # per draw the error is 0.7 with probability 0.3 and -0.3 with probability 0.7: sd 0.458
    assert float(bias[2:].abs().max()) < 5 * 0.4583 / math.sqrt(draws)
    nearest = codec.decode(codec.encode(x), width)[0] - x[0]
    assert torch.allclose(nearest[2:], torch.full((width - 2,), -0.3), atol=1e-5)


def test_draws_are_keyed_rows_are_independent_and_threads_change_nothing():
    x = torch.randn(500, 96)
    a = MessageCodec("int4", threads=1).encode(x, stochastic=True, key=stream_key(3, 5, 1))
    b = MessageCodec("int4", threads=2).encode(x, stochastic=True, key=stream_key(3, 5, 1))
    c = MessageCodec("int4").encode(x, stochastic=True, key=stream_key(3, 5, 2))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    # two equal rows draw differently (the row number is in the key)
    same = MessageCodec("int2").encode(x[:1].repeat(2, 1), stochastic=True, key=1)
    assert not torch.equal(same[0], same[1])


def test_a_non_finite_value_poisons_its_group_only():
    x = torch.randn(3, 64)
    x[1, 5] = float("inf")
    x[2, 40] = float("nan")
    y = MessageCodec("int8", group=32).decode(MessageCodec("int8", group=32).encode(x), 64)
    assert torch.isnan(y[1, :32]).all() and torch.isfinite(y[1, 32:]).all()
    assert torch.isnan(y[2, 32:]).all() and torch.isfinite(y[2, :32]).all()
    assert torch.isfinite(y[0]).all()


def test_constant_rows_and_bf16_and_fp32():
    x = torch.full((4, 10), 2.5)
    for precision in WIDTHS:
        codec = MessageCodec(precision)
        assert torch.equal(codec.decode(codec.encode(x, stochastic=True, key=9), 10), x)
    r = torch.randn(5, 8)
    assert MessageCodec("fp32").encode(r) is r
    half = MessageCodec("bf16")
    assert half.encode(r).dtype == torch.bfloat16 and half.row_bytes(8) == 16
    assert torch.equal(half.decode(half.encode(r), 8), r.to(torch.bfloat16).float())


@pytest.mark.parametrize("precision", WIDTHS + ("fp32", "bf16"))
def test_decoding_into_a_table_is_decoding_then_scattering(isa, precision):
    """The decode fused with the scatter (``decode_into``) leaves the table as decoding first and
    then ``table[ids] = rows`` (distinct ids) or ``table.index_add_(0, ids, rows)`` (ids repeated
    and unsorted: summed in their order) leave it, bit for bit, any group and thread count; a
    table that is not contiguous float32 takes the unfused path; an id outside the table and an
    add without ids are refused."""
    x = torch.randn(9, 70) * 3
    distinct = torch.tensor([5, 299, 0, 17, 140, 2, 88, 1, 250], dtype=torch.int64)
    repeated = torch.tensor([5, 299, 0, 5, 17, 5, 2, 299, 0], dtype=torch.int64)
    for group in (0, 32):
        codec = MessageCodec(precision, group=group if precision in MESSAGE_BITS else 0, threads=2)
        wire = codec.encode(x, stochastic=True, key=7)
        rows = codec.decode(wire, 70)
        for ids, add in ((distinct, False), (repeated, True), (distinct, True)):
            table = torch.randn(300, 70)
            want = table.clone()
            if add:
                want.index_add_(0, ids, rows)
            else:
                want[ids] = rows
            codec.decode_into(wire, table, ids, add)
            assert torch.equal(table, want), (group, add)
        strided = torch.randn(300, 140)[:, ::2]
        want = strided.clone().index_add_(0, repeated, rows)
        codec.decode_into(wire, strided, repeated, add=True)
        assert torch.equal(strided, want)
    if precision in MESSAGE_BITS:
        wire = MessageCodec(precision).encode(x[:1])
        for bad in (300, -1):
            with pytest.raises(IndexError, match="index"):
                _native.quantize_decode(wire, torch.zeros(300, 70), MESSAGE_BITS[precision], 0, 1,
                                        torch.tensor([bad]), True)
        with pytest.raises(ValueError, match="add needs an index"):
            _native.quantize_decode(wire, torch.zeros(1, 70), MESSAGE_BITS[precision], 0, 1,
                                    None, True)


@pytest.mark.parametrize("precision", WIDTHS + ("fp32", "bf16"))
def test_encoding_rows_by_index_is_encoding_the_gathered_rows(isa, precision):
    """The fused gather and encode (``ids``) writes the bytes of encoding ``x[ids]``, both
    roundings, repeated and unsorted ids, any thread count; a table that is not contiguous float32
    is gathered first; an id outside the table is refused."""
    x = torch.randn(300, 70)
    ids = torch.tensor([5, 299, 0, 5, 17, 140, 2], dtype=torch.int64)
    for group in (0, 32):
        codec = MessageCodec(precision, group=group if precision in MESSAGE_BITS else 0, threads=2)
        for stochastic in (False, True):
            fused = codec.encode(x, stochastic, key=11, ids=ids)
            assert torch.equal(fused, codec.encode(x[ids], stochastic, key=11))
            assert torch.equal(codec.encode(x, stochastic, 11, ids.to(torch.int32)), fused)
        wide = torch.randn(300, 140)[:, ::2]          # a strided view
        assert torch.equal(codec.encode(wide, True, 3, ids), codec.encode(wide[ids], True, 3))
        assert codec.encode(x, ids=ids[:0]).shape[0] == 0
    if precision in MESSAGE_BITS:
        packed = torch.empty((1, MessageCodec(precision).row_bytes(70)), dtype=torch.uint8)
        for bad in (300, -1):
            with pytest.raises(IndexError, match="index"):
                _native.quantize_encode(x, packed, MESSAGE_BITS[precision], 0, False, 0, 1,
                                        torch.tensor([bad]))
