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
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.common import machine_line
from distgnn.kernels import ops
from distgnn.kernels.message_codec import MessageCodec


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 172, 256])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 0],
                        help="threads per call (0: all cores)")
    parser.add_argument("--out", default=None, help="also write the table here")
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
                    runs = {"encode": [], "stochastic": [], "decode": [], "memcpy": []}
                    saved = torch.get_num_threads()
                    if threads:
                        torch.set_num_threads(threads)
                    for _ in range(args.repeats):  # alternate the contenders
                        runs["memcpy"] += timed(lambda: copy_into.copy_(x), 1)
                        runs["encode"] += timed(lambda: codec.encode(x), 1)
                        runs["stochastic"] += timed(lambda: codec.encode(x, True, 7), 1)
                        runs["decode"] += timed(lambda: codec.decode(packed, width, out=into), 1)
                    torch.set_num_threads(saved)
                    rate = {k: gb / statistics.median(v) for k, v in runs.items()}
                    ratio = codec.row_bytes(width) / (4 * width)
                    line = (f"| {isa} | {threads or os.cpu_count()} | {width} | {precision} | "
                            f"{rate['encode']:.2f} | {rate['stochastic']:.2f} | {rate['decode']:.2f} | "
                            f"{rate['memcpy']:.2f} | {rate['encode'] / rate['memcpy']:.2f} | "
                            f"{rate['decode'] / rate['memcpy']:.2f} | {ratio:.4f} |")
                    lines.append(line)
                    print(line, flush=True)
    ops.set_isa("host")
    tail = f"\nload average after: {os.getloadavg()[0]:.2f}"
    print(tail)
    lines.append(tail)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
