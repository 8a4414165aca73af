"""A delayed-update rule added from this file alone (docs/design.md#rule-hooks): registered, it is a
``--cdr-rule`` choice with its own help line, the exchange spec resolves it, and it trains under
mpiexec, where this same file is the script that registers it and runs the ``distgnn`` CLI.

The toy rule ``damped`` halves the remote part R (the leaves' delivered partials) in every
aggregate: before the first delivery R is zero, so its first epochs equal the first rule's bit for
bit; afterwards they differ.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from distgnn.exchange.rules import CdrRule, register_rule, rule_names, unregister_rule


class Damped(CdrRule):
    """The first rule, with the stale remote part R halved in every aggregate."""

    name = "damped"
    summary = "the first rule with half of the remote part"

    def merge(self, root, state, step, out):
        return out - 0.5 * state.remote


@pytest.fixture
def damped():
    register_rule(Damped)
    yield Damped
    unregister_rule("damped")
    assert "damped" not in rule_names()


def test_a_registered_rule_is_a_choice_with_help_and_resolves(damped) -> None:
    from distgnn.cli import build_parser
    from distgnn.commands.train import config_from_args
    from distgnn.errors import DistgnnError

    parser = build_parser()
    train = next(a for a in parser._subparsers._group_actions[0].choices["train"]._actions
                 if "--cdr-rule" in a.option_strings)
    assert "damped" in train.choices and "damped: the first rule with half" in train.help
    config = config_from_args(parser.parse_args(["train", "p", "--algo", "cd-2", "--cdr-rule",
                                                 "damped"]))
    exchange = config.exchange_spec()
    assert exchange.rule is Damped and exchange.cdr_at_root and not exchange.recomputes
    assert config.hyperparameters()["cdr_rule"] == "damped"
    with pytest.raises(DistgnnError, match="--cdr-rule: only for cd-<r> under --apply root"):
        config_from_args(parser.parse_args(["train", "p", "--algo", "cd-0", "--cdr-rule",
                                            "damped"])).exchange_spec()


def test_registration_refusals(damped) -> None:
    from distgnn.errors import DistgnnError

    class Other(CdrRule):
        name = "damped"

    with pytest.raises(DistgnnError, match="registered already"):
        register_rule(Other)
    with pytest.raises(DistgnnError, match="built in"):
        unregister_rule("recompute")
    with pytest.raises(DistgnnError, match="expected a CdrRule subclass"):
        register_rule(dict)


@pytest.mark.mpi
def test_a_registered_rule_trains(tmp_path: Path) -> None:
    from conftest import mpiexec, run_cli
    from distgnn.data.fetch import fetch

    graph = fetch("synth-reddit", root=tmp_path, scale=0.005, name="g")
    parts = tmp_path / "libra-2"
    assert run_cli("partition", graph, "--parts", "2", "--out", parts, "--quiet").returncode == 0
    common = ["--algo", "cd-2", "--epochs", "6", "--eval-every", "0", "--threads", "1",
              "--hidden", "16", "--quiet", "--no-delayed-gradients"]
    runs = {rule: tmp_path / rule for rule in ("delayed", "damped")}
    argv = [["train", str(parts), "--out", str(run), "--cdr-rule", rule, *common]
            for rule, run in runs.items()]
    proc = mpiexec(2, __file__, json.dumps(argv), module=False, env={"DISTGNN_TILES": "off"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    loss = {rule: [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]
            for rule, run in runs.items()}
    # R is zero until the first delivery, at step r = 2 of each layer: epochs 0 and 1 agree
    assert loss["damped"][:2] == loss["delayed"][:2]
    assert all(a != b for a, b in zip(loss["damped"][2:], loss["delayed"][2:]))
    summary = json.loads((runs["damped"] / "summary.json").read_text())
    assert summary["hyperparameters"]["cdr_rule"] == "damped"


if __name__ == "__main__":  # under mpiexec: register the rule, then run each distgnn command line
    from distgnn.cli import main

    register_rule(Damped)
    for command in json.loads(sys.argv[1]):
        status = main(command)
        if status:
            sys.exit(status)
