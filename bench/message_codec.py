"""Packing and unpacking speed of the wire codec against a memcpy of the same bytes, side by side.

    python -m bench.message_codec [--rows 200000] [--widths 64 172 256] [--repeats 7]
                                  [--threads 1 0] [--out bench/results/message-codec-DATE.txt]

For every instruction set this host runs (base, avx2, avx512), every ``--message-precision`` width
(int8, int4, int2; bf16 through torch's cast) and every row width, times encoding float32 rows
(round to nearest and stochastic) and decoding them, each alternated with a copy of the same
float32 matrix into a preallocated one (torch's ``copy_``: the memcpy), and prints GB/s of float32
rows (4 F bytes a row, in for encode, out for decode) and the ratio to the copy. Decoding writes
into a buffer made once (as the copy does); encoding allocates its packed rows, as an exchange
does. Median of
``--repeats``; the load average is printed before and after.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

from bench.common import (add_codec_table_options, finish_table, interleaved_median,
                          machine_line, table_row)
from distgnn.kernels import ops
from distgnn.kernels.message_codec import MessageCodec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    add_codec_table_options(parser)
    args = parser.parse_args()
    lines = [f"# Wire codec vs memcpy: {args.rows} rows, median of {args.repeats}",
             machine_line(max(args.threads) or (os.cpu_count() or 1)), "",
             "| isa | threads | width | codec | encode GB/s | stochastic GB/s | decode GB/s | "
             "memcpy GB/s | encode / memcpy | decode / memcpy | bytes vs fp32 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for isa in ops.supported_isas():
        ops.set_isa(isa)
        for threads in args.threads:
            for width in args.widths:
                x = torch.randn(args.rows, width)
                copy_into = torch.empty_like(x)
                gb = x.numel() * 4 / 1e9
                for precision in ("bf16", "int8", "int4", "int2"):
                    if precision == "bf16" and isa != ops.supported_isas()[-1]:
                        continue  # torch's cast does not follow the kernels' ISA
                    codec = MessageCodec(precision, threads=threads)
                    packed = codec.encode(x)
                    into = torch.empty_like(x)  # decode into a buffer made once, as the copy does
                    saved = torch.get_num_threads()
                    if threads:
                        torch.set_num_threads(threads)
                    runs = interleaved_median({  # the contenders alternate
                        "memcpy": lambda: copy_into.copy_(x),
                        "encode": lambda: codec.encode(x),
                        "stochastic": lambda: codec.encode(x, True, 7),
                        "decode": lambda: codec.decode(packed, width, out=into)}, args.repeats)
                    torch.set_num_threads(saved)
                    rate = {k: gb / v for k, v in runs.items()}
                    ratio = codec.row_bytes(width) / (4 * width)
                    table_row(lines, isa, threads or os.cpu_count(), width, precision,
                              *(f"{rate[k]:.2f}" for k in ("encode", "stochastic", "decode", "memcpy")),
                              f"{rate['encode'] / rate['memcpy']:.2f}",
                              f"{rate['decode'] / rate['memcpy']:.2f}", f"{ratio:.4f}")
    ops.set_isa("host")
    finish_table(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
