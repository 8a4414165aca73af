"""--precision auto: bf16 only where every rank's CPU multiplies bfloat16 natively
(docs/design.md#precision)."""
from __future__ import annotations

import pytest

from distgnn.cpu_precision import native_bf16_flag, resolve_precision
from distgnn.train.config import TrainConfig, check_config, with_precision_resolved

AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse4_2 avx avx2 fma\n"


@pytest.mark.parametrize("cpuinfo, flag", [(AMX, "amx_bf16"), (ZEN4, "avx512_bf16"), (AVX2, None), ("", None)])
def test_the_native_bf16_flag_is_read_from_cpuinfo(cpuinfo, flag) -> None:
    assert native_bf16_flag(cpuinfo) == flag


def test_auto_takes_bf16_only_when_every_host_has_it_and_says_why() -> None:
    assert resolve_precision("fp32", {}) == ("fp32", "fp32: as requested (--precision fp32)")
    assert resolve_precision("bf16", {})[0] == "bf16"
    precision, reason = resolve_precision("auto", {"a": "amx_bf16", "b": "avx512_bf16"})
    assert precision == "bf16" and "amx_bf16, avx512_bf16" in reason
    precision, reason = resolve_precision("auto", {"a": "amx_bf16", "old-node": None})
    assert precision == "fp32" and "old-node" in reason and "a," not in reason


class _Ranks:
    """A stand-in communicator whose ranks report the given (host, flag) pairs."""

    def __init__(self, pairs):
        self.pairs = pairs

    def allgather(self, _mine):
        return self.pairs


def test_ranks_on_one_host_count_once_and_one_rank_without_it_decides() -> None:
    auto = TrainConfig(precision="auto")
    check_config(auto)   # accepted before it is resolved
    resolved = with_precision_resolved(auto, _Ranks([("n1", "amx_bf16"), ("n1", "amx_bf16")]))
    assert resolved.precision == "bf16" and resolved.precision_reason.startswith("auto chose bf16")
    resolved = with_precision_resolved(auto, _Ranks([("n1", "amx_bf16"), ("n2", None), ("n2", "amx_bf16")]))
    assert resolved.precision == "fp32" and "n2" in resolved.precision_reason
    # an explicit precision asks no one
    assert with_precision_resolved(TrainConfig(precision="bf16"), None).precision == "bf16"
    assert resolved.hyperparameters()["precision"] == "fp32"
