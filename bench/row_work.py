"""Rows the aggregation touches per epoch at the root: written by the kernel, zeroed and copied by
the exchange (``rows_*`` of ``metrics.jsonl``), beside the row counts of the partition itself.

    python -m bench.row_work PARTDIR [PARTDIR ...] [--algos cd-0 cd-5] [--epochs 12]
                             [--checkout DIR] [--out FILE]

Trains each algorithm (apply-at-root, GraphSAGE, hidden 16: the counts do not depend on widths)
on each partition folder with P ranks (oversubscribed: a count, not a time) and prints, summed
over ranks, the mean per epoch over the last two epochs (cd-r's steady state once
``--epochs`` >= 2r + 2) of ``rows_written``, ``rows_zeroed`` and ``rows_copied``. Beside them,
from the partition: n_k (every local row), n_dst (roots and leaves with local in-edges) and n_src
(roots and leaves with local out-edges), summed over parts (docs/design.md#compact-rows).
``--checkout DIR`` runs another checkout's code (its ``.venv``), e.g. the commit before a change,
so the same command gives the before and the after.

``--kernel-widths W [W ...]`` instead times the kernel alone, in this process, on part 0 of each
folder: forward and transposed over all n_k local rows (as before the compact tables) against the
compact tables, one thread, tiling off, interleaved, the minimum of ``--repeats`` rounds, with the
load average printed (the same edges on both sides: only the rows differ).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

KINDS = ("written", "zeroed", "copied")


def partition_rows(partdir: Path) -> dict[str, int]:
    """n_k, n_dst and n_src summed over the parts of ``partdir``."""
    from distgnn.partition.part_loader import load_partition, read_num_parts

    totals = {"n_k": 0, "n_dst": 0, "n_src": 0}
    for k in range(read_num_parts(partdir)):
        part = load_partition(partdir, k)
        roots = part.num_roots
        in_degree = part.local_degree[roots:]
        out_degree = (part.t_indptr[1:] - part.t_indptr[:-1])[roots:]
        totals["n_k"] += part.num_local
        totals["n_dst"] += roots + int((in_degree > 0).sum())
        totals["n_src"] += roots + int((out_degree > 0).sum())
    return totals


def counted_rows(python: str, cwd: Path, partdir: Path, algo: str, epochs: int,
                 run_dir: Path) -> dict[str, float]:
    """The mean ``rows_*`` per epoch over the last two epochs of one run."""
    from distgnn.partition.part_loader import read_num_parts

    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMP_NUM_THREADS": "1"}
    cmd = ["mpiexec", "--oversubscribe", "-n", str(read_num_parts(partdir)), python, "-m",
           "distgnn", "train", str(partdir.resolve()), "--algo", algo, "--apply", "root",
           "--epochs", str(epochs), "--hidden", "16", "--threads", "1", "--quiet", "--out",
           str(run_dir)]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = records[-2:]
    return {kind: sum(r[f"rows_{kind}"] for r in last) / len(last) for kind in KINDS}


def kernel_times(partdir: Path, widths: list[int], repeats: int) -> list[dict]:
    """The kernel's forward + transposed seconds on part 0 over all local rows and over the
    compact tables, per width."""
    import torch

    from bench.common import interleaved_min
    from distgnn.kernels import ops, tiling
    from distgnn.exchange.compact import compact_rows
    from distgnn.partition.part_loader import load_partition

    tiling.set_mode("off")
    part = load_partition(partdir, 0)
    rows = compact_rows(part, part.num_roots)
    g, n = rows.graph, part.num_local
    out = []
    for width in widths:
        x, grad = torch.randn(n, width), torch.randn(n, width)
        x_src, grad_dst = x[rows.sources].contiguous(), grad[rows.destinations].contiguous()

        def every_row() -> None:
            ops.weighted_sum(part.indptr, part.indices, x, threads=1)
            ops.weighted_sum(part.t_indptr, part.t_indices, grad, threads=1)

        def compact() -> None:
            ops.weighted_sum(g.indptr, g.indices, x_src, threads=1)
            ops.weighted_sum(g.t_indptr, g.t_indices, grad_dst, threads=1)

        best = interleaved_min({"n_k rows": every_row, "compact": compact}, repeats)
        out.append({"partition": str(partdir), "width": width, "n_k": n, "n_dst": g.n_dst,
                    "n_src": g.n_src, "edges": int(part.indices.shape[0]), **best})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("partdirs", nargs="+", type=Path)
    parser.add_argument("--algos", nargs="+", default=["cd-0", "cd-5"])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--checkout", type=Path, help="run this checkout's code (DIR/.venv)")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--kernel-widths", type=int, nargs="+",
                        help="time the kernel alone at these row widths instead (module text)")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    if args.kernel_widths:
        from bench.common import machine_line

        print(machine_line(1))
        print("| partition | part 0: n_k / n_dst / n_src rows, edges | width | n_k rows ms "
              "| compact ms | compact / n_k rows |")
        print("|---|---|---|---|---|---|")
        for partdir in args.partdirs:
            for t in kernel_times(partdir, args.kernel_widths, args.repeats):
                print(f"| {partdir.name} | {t['n_k']:,} / {t['n_dst']:,} / {t['n_src']:,}, "
                      f"{t['edges']:,} | {t['width']} | {t['n_k rows'] * 1e3:.2f} | "
                      f"{t['compact'] * 1e3:.2f} | {t['compact'] / t['n_k rows']:.2f} |",
                      flush=True)
        print(f"load average after: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
        return 0
    checkout = (args.checkout or Path.cwd()).resolve()
    python = str(checkout / ".venv" / "bin" / "python") if args.checkout else sys.executable
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"code: {checkout} at {commit}; rows per epoch, summed over ranks")
    print("| partition | P | n_k | n_dst | n_src | algo | written | zeroed | copied |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory(prefix="distgnn-rows-") as tmp:
        for partdir in args.partdirs:
            shape = partition_rows(partdir)
            from distgnn.partition.part_loader import read_num_parts

            parts = read_num_parts(partdir)
            for algo in args.algos:
                counts = counted_rows(python, checkout, partdir, algo, args.epochs,
                                      Path(tmp) / f"{partdir.name}-{algo}")
                rows.append({"partition": str(partdir), "P": parts, "algo": algo, **shape,
                             **counts})
                print(f"| {partdir.name} | {parts} | {shape['n_k']:,} | {shape['n_dst']:,} | "
                      f"{shape['n_src']:,} | {algo} | "
                      + " | ".join(f"{counts[k]:,.0f}" for k in KINDS) + " |", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"commit": commit, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
