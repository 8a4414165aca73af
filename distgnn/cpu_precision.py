"""``--precision auto``: bfloat16 where every rank's CPU multiplies bfloat16 natively, float32
elsewhere (docs/design.md#precision). Pure Python: read before torch starts.

A CPU with AMX (``amx_bf16``) or AVX512-BF16 (``avx512_bf16``) runs torch's bfloat16 GEMM at
about twice to four times its float32 rate (bench/results/epoch-*-602-*.txt); without either,
bfloat16 is emulated and slower than float32. The ranks of a run must agree (the rows they
exchange share one dtype), so ``auto`` takes bf16 only when every rank's CPU has one of them.
"""
from __future__ import annotations

from pathlib import Path

#: /proc/cpuinfo flags that give a native bfloat16 matmul, the faster first
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def native_bf16_flag(cpuinfo: str | None = None) -> str | None:
    """The first of :data:`NATIVE_BF16_FLAGS` this CPU has (``cpuinfo``: the text of
    /proc/cpuinfo, read when None), or None (none of them, or no /proc/cpuinfo)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            break
    return next((flag for flag in NATIVE_BF16_FLAGS if flag in flags), None)


def resolve_precision(requested: str, flag_by_host: dict[str, str | None]) -> tuple[str, str]:
    """(precision that runs, why) for ``--precision requested`` given each host's
    :func:`native_bf16_flag` (every host the run's ranks are on)."""
    if requested != "auto":
        return requested, f"{requested}: as requested (--precision {requested})"
    lacking = sorted(host for host, flag in flag_by_host.items() if flag is None)
    if lacking:
        named = ", ".join(lacking[:3]) + (f" and {len(lacking) - 3} more" if len(lacking) > 3 else "")
        return "fp32", (f"auto chose fp32: the CPU of {named} has no native bfloat16 matmul "
                        f"({' or '.join(NATIVE_BF16_FLAGS)})")
    flags = sorted(set(flag_by_host.values()), key=NATIVE_BF16_FLAGS.index)  # type: ignore[arg-type]
    return "bf16", (f"auto chose bf16: every host's CPU multiplies bfloat16 natively "
                    f"({', '.join(flags)})")
