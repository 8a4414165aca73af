"""Compare two test suites' ``pytest --durations=0`` outputs, test id by test id.

    python -m bench.suite_durations BEFORE.txt AFTER.txt [--explained SUBSTRING ...]

Sums call + setup + teardown per test id, keeps the ids that ran and passed in both, and prints
their totals and ratio, the ids that grew most and, with ``--explained``, the totals of the ids
matching any substring (tests whose growth has a known cause) apart from the rest.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


def durations(path: Path) -> tuple[dict[str, float], set[str]]:
    """Seconds per test id, and the ids that failed."""
    seconds: dict[str, float] = {}
    failed: set[str] = set()
    for line in path.read_text().splitlines():
        m = re.match(r"\s*([\d.]+)s (call|setup|teardown)\s+(\S+)", line)
        if m:
            seconds[m.group(3)] = seconds.get(m.group(3), 0.0) + float(m.group(1))
        m = re.match(r"FAILED (\S+)", line)
        if m:
            failed.add(m.group(1))
    return seconds, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--explained", nargs="*", default=[], metavar="SUBSTRING")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    (old, old_failed), (new, new_failed) = durations(args.before), durations(args.after)
    common = sorted(k for k in set(old) & set(new) if k not in old_failed | new_failed)
    so, sn = sum(old[k] for k in common), sum(new[k] for k in common)
    print(f"ids with a duration: before {len(old)}, after {len(new)}; passing in both {len(common)}: "
          f"{so:.1f} s -> {sn:.1f} s ({sn / so:.3f})")
    print(f"every id: before {sum(old.values()):.1f} s, after {sum(new.values()):.1f} s; "
          f"ids only after {sum(v for k, v in new.items() if k not in old):.1f} s")
    print("\ngrew most (s: change, before, after):")
    for k in sorted(common, key=lambda k: new[k] - old[k], reverse=True)[:args.top]:
        print(f"{new[k] - old[k]:+6.1f} {old[k]:6.1f} {new[k]:6.1f}  {k}")
    if args.explained:
        known = [k for k in common if any(s in k for s in args.explained)]
        rest = [k for k in common if k not in known]
        ko, kn = sum(old[k] for k in known), sum(new[k] for k in known)
        ro, rn = sum(old[k] for k in rest), sum(new[k] for k in rest)
        print(f"\nexplained ({len(known)} ids): {ko:.1f} s -> {kn:.1f} s; the other {len(rest)} ids: "
              f"{ro:.1f} s -> {rn:.1f} s ({rn / ro:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
