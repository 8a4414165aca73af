"""Time and peak memory of converting a twin: ``python -m bench.fetch [--dataset D] [--scale S]``.

Default: synth-products at scale 1 (2.45M vertices, about 124M directed edges, 100 features);
target under 3 minutes and under 8 GiB on 2 cores. Each repeat runs the real CLI in a child
process and reads that child's peak RSS.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time

PROBE = """
import resource, subprocess, sys
subprocess.run([sys.executable, '-m', 'distgnn', 'fetch', *sys.argv[1:]], check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default="synth-products")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--root", default=None, help="where to write (default: a temp folder, removed)")
    args = parser.parse_args()
    rows = []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(dir=args.root) as root:
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", PROBE, args.dataset, "--scale",
                                   str(args.scale), "--root", root, "--quiet"],
                                  capture_output=True, text=True, check=True)
            wall = time.perf_counter() - start
            peak = int(proc.stdout.strip().splitlines()[-1]) * 1024
            size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
            rows.append((wall, peak, size))
    wall = min(r[0] for r in rows)
    peak = max(r[1] for r in rows)
    size = rows[0][2]
    print(f"# distgnn fetch {args.dataset} --scale {args.scale:g}")
    print(f"machine: {platform.node()} {os.cpu_count()} cores, {platform.processor() or platform.machine()}; "
          f"{datetime.date.today()}")
    print("| dataset | scale | wall s (min of %d) | peak RSS GiB | store GiB | target |" % len(rows))
    print("|---|---|---|---|---|---|")
    ok = wall < 180 and peak < 8 * 2**30
    print(f"| {args.dataset} | {args.scale:g} | {wall:.1f} | {peak / 2**30:.2f} | {size / 2**30:.2f} | "
          f"< 180 s, < 8 GiB: {'met' if ok else 'MISSED'} |")


if __name__ == "__main__":
    main()
