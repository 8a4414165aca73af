"""Numeric options out of range are one line naming the option, exit 2, checked before any
estimate or write: ``fetch --scale nan`` (it used to reach the resource estimate first and end
in a traceback), ``scaling-model`` with ``--layers 0`` or ``--hidden -5``."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli
from distgnn.errors import DistgnnError

REPO = Path(__file__).resolve().parents[1]


def one_line(proc, *words: str) -> None:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(w in lines[0] for w in words), lines


@pytest.mark.parametrize("option, value", [("--scale", "nan"), ("--scale", "inf"), ("--scale", "0"),
                                           ("--mean-degree", "nan"), ("--labelled-fraction", "inf"),
                                           ("--chunk-mb", "-1")])
def test_fetch_refuses_a_number_out_of_range_before_anything(tmp_path: Path, option, value) -> None:
    root = tmp_path / "data"
    proc = run_cli("fetch", "synth-reddit", option, value, "--root", root)
    one_line(proc, f"{option} must ", value)
    assert not root.exists()


@pytest.mark.parametrize("verb", ["predict", "estimate-memory"])
@pytest.mark.parametrize("option, value", [("--layers", "0"), ("--hidden", "-5")])
def test_scaling_model_refuses_a_shape_out_of_range(tmp_path: Path, verb, option, value) -> None:
    where = (["--calibration", str(REPO / "docs" / "scale-calibration.json")] if verb == "predict"
             else [str(tmp_path)])
    proc = run_cli("scaling-model", verb, *where, option, value)
    one_line(proc, f"{option} must be >= 1, got {value}")


@pytest.mark.parametrize("options, needle", [
    (dict(algo="0c", message_precision="int8"), "--message-precision int8: 0c sends no training rows"),
    (dict(message_group=16), "--message-group: only with an integer --message-precision"),
    (dict(message_precision="int4", message_group=-1), "--message-group must be an integer >= 0"),
    (dict(message_precision="int3"), "--message-precision must be one of"),
    (dict(model="gat", message_precision="int8"), "GAT's attention partials"),
])
def test_message_options_are_refused_where_they_do_not_apply(options, needle) -> None:
    from distgnn.train.config import TrainConfig, check_config

    with pytest.raises(DistgnnError, match=needle):
        check_config(TrainConfig(**options))


def test_message_precision_resolves_and_is_recorded() -> None:
    from distgnn.train.config import TrainConfig

    assert TrainConfig().exchange_spec().messages == "fp32"
    assert TrainConfig(precision="bf16").exchange_spec().messages == "bf16"  # auto follows it
    config = TrainConfig(algo="cd-5", message_precision="int2", message_group=64)
    assert (config.exchange_spec().messages, config.exchange_spec().message_group) == ("int2", 64)
    assert config.hyperparameters()["message_precision"] == "int2"
    assert config.hyperparameters()["message_group"] == 64
