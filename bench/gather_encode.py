"""The send side of an exchange at an integer width: the rows gathered by id and then encoded,
against the fused gather and encode the exchange now runs (docs/design.md#message-precision),
side by side.

    python -m bench.gather_encode [--table 400000] [--send 100000] [--widths 64 172 256]
                                  [--repeats 7] [--threads 1 0] [--out FILE]

A table of ``--table`` float32 rows; ``--send`` of them (sorted random ids, as a plan's) are
sent. For every instruction set this host runs and each width and integer precision, the
contenders alternate ``--repeats`` times: ``gather then encode`` (``codec.encode(x[ids])``, the
code before), ``fused`` (``codec.encode(x, ids=ids)``), and for scale the float32 send,
``gather`` (``x[ids]``, what a float32 exchange sends: a fresh tensor) and ``gather into a reused
buffer`` (``torch.index_select(x, 0, ids, out=buffer)``). Both integer contenders write the same
bytes (checked here before timing). Printed: nanoseconds per sent value (median), and the fused
path's speed-up; the load average before and after.
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
    parser.add_argument("--table", type=int, default=400_000, help="rows of the table")
    parser.add_argument("--send", type=int, default=100_000, help="rows sent")
    add_codec_table_options(parser)
    args = parser.parse_args()
    lines = [f"# Gather then encode vs fused gather-encode: {args.send} of {args.table} rows, "
             f"stochastic rounding, median of {args.repeats}",
             machine_line(max(args.threads) or (os.cpu_count() or 1)), "",
             "| isa | threads | width | codec | fp32 gather ns/value | into a reused buffer "
             "| gather then encode ns/value | fused ns/value | fused speed-up |",
             "|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    generator = torch.Generator().manual_seed(0)
    for isa in ops.supported_isas():
        ops.set_isa(isa)
        for threads in args.threads:
            saved = torch.get_num_threads()
            if threads:
                torch.set_num_threads(threads)
            for width in args.widths:
                x = torch.randn(args.table, width, generator=generator)
                ids = torch.randperm(args.table, generator=generator)[:args.send].sort().values
                buffer = torch.empty(args.send, width)
                values = args.send * width
                for precision in ("int8", "int4", "int2"):
                    codec = MessageCodec(precision, threads=threads)
                    if not torch.equal(codec.encode(x[ids], True, 7), codec.encode(x, True, 7, ids)):
                        raise SystemExit(f"{isa} {precision} {width}: the fused bytes differ")
                    runs = interleaved_median({
                        "gather": lambda: x[ids],
                        "reused": lambda: torch.index_select(x, 0, ids, out=buffer),
                        "separate": lambda: codec.encode(x[ids], True, 7),
                        "fused": lambda: codec.encode(x, True, 7, ids)}, args.repeats)
                    ns = {k: v / values * 1e9 for k, v in runs.items()}
                    table_row(lines, isa, threads or os.cpu_count(), width, precision,
                              *(f"{ns[k]:.2f}" for k in ("gather", "reused", "separate", "fused")),
                              f"{ns['separate'] / ns['fused']:.2f}x")
            torch.set_num_threads(saved)
    ops.set_isa("host")
    finish_table(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
