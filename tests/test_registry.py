"""The vocabulary and the model registry (docs/design.md#models): the shared names load no torch,
the schema, the CLI and the registry name the same models, and a model registered from outside
the package (here, in a test) is accepted by the config check, estimated, costed and built
without any other file changing."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def test_vocabulary_and_registry_import_no_torch() -> None:
    """The names every layer shares, the registry, the config check and the models package
    (without building a model) load neither torch nor numpy."""
    code = ("import sys, distgnn.vocabulary, distgnn.models.registry, distgnn.models, "
            "distgnn.train.config; print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _choices(parser: argparse.ArgumentParser, *path: str) -> dict[str, tuple]:
    """The choices of every option of the subcommand at ``path`` (``train``, ``scaling-model
    predict``), by destination."""
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return {a.dest: tuple(a.choices) for a in parser._actions if a.choices is not None}


def _action(parser: argparse.ArgumentParser, *path: str, dest: str) -> argparse.Action:
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return next(a for a in parser._actions if a.dest == dest)


def test_schema_cli_and_registry_name_the_same_models() -> None:
    from distgnn.cli import build_parser
    from distgnn.models import registry
    from distgnn.train.config import TrainConfig
    from distgnn.vocabulary import AGGREGATORS
    from distgnn.workflow_config import registry_mismatch

    MODELS = registry.BUILT_IN
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    train = schema["properties"]["train"]["properties"]
    assert registry_mismatch(schema) is None   # the one check of the schema's enums
    assert train["model"]["default"] == TrainConfig.model == registry.DEFAULT_MODEL == MODELS[0]
    assert tuple(train["aggregator"]["enum"]) == AGGREGATORS
    parser = build_parser()
    for path in (("train",), ("launch",), ("scaling-model", "predict"),
                 ("scaling-model", "estimate-memory")):
        # --model takes a built-in name or a class's import path (docs/design.md#own-model): no
        # fixed choices, and its help names every built-in model and the import-path form
        assert "model" not in _choices(parser, *path), path
        help_text = _action(parser, *path, dest="model").help
        assert all(m in help_text for m in MODELS) and "package.module:Class" in help_text, path
    assert _choices(parser, "train")["aggregator"] == AGGREGATORS
    # every model option is a TrainConfig field with the option's default
    defaults = {f.name: f.default for f in fields(TrainConfig)}
    for name, option in registry.all_options().items():
        assert defaults[name] == option.default, name


def test_built_in_specs_match_their_modules() -> None:
    """Each built-in spec's norm, parameter count and input cache are its module's."""
    from distgnn.models import registry

    for name in registry.names():
        spec = registry.spec(name)
        model = registry.build_model(name, 30, 16, 5, 3)
        assert model.norm == spec.norm_of(), name
        assert sum(p.numel() for p in model.parameters()) == spec.num_parameters(30, 16, 5, 3), name
        assert bool(getattr(model, "takes_input_aggregate", False)) == spec.input_cache, name
        assert bool(getattr(model, "uses_attention", False)) == spec.attention, name
    sage = registry.build_model("sage", 30, 16, 5, 2, aggregator="gcn")
    assert sage.norm == registry.spec("sage").norm_of(aggregator="gcn") == "gcn"


def _toy_builder(in_dim: int, hidden: int, out_dim: int, layers: int, dropout: float = 0.5):
    """A one-map-per-layer model with mean aggregation (linear, then aggregate)."""
    import torch
    from torch import nn

    class Toy(nn.Module):
        norm = "mean"

        def __init__(self) -> None:
            super().__init__()
            dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
            self.layers = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(layers))

        def forward(self, x, aggregate, dropout=None):
            h = x
            for i, layer in enumerate(self.layers):
                h = aggregate(i, layer(torch.relu(h) if i else h))
            return h

    return Toy()


def toy_spec():
    """The toy model's registry entry: no input cache, no layer stack of the built-in kind."""
    from distgnn.models import registry

    return registry.ModelSpec("toy", "a test's model", _toy_builder, norm="mean", input_cache=False,
                              recomputes=False)


@pytest.fixture
def toy():
    from distgnn.models import registry

    spec = registry.register(toy_spec())
    yield spec
    registry.unregister("toy")
    assert "toy" not in registry.names()


def test_a_model_registered_outside_the_package_runs_through_every_check(toy) -> None:
    """Registered here, touching no config, estimate, cost or workflow code: the config check and
    the CLI accept it (and refuse another model's option for it), the memory estimate and the
    scaling model's costs follow its shape, and it builds to the registered parameter count."""
    import torch

    from distgnn.cli import build_parser
    from distgnn.commands.train import config_from_args
    from distgnn.errors import DistgnnError
    from distgnn.models import build_model
    from distgnn.scaling.costs import GraphShape, ModelShape
    from distgnn.train.config import TrainConfig, check_config
    from distgnn.scaling.rank_memory import PartShape, estimate_shape, layer_widths
    from distgnn.models.registry import run_name

    assert check_config(TrainConfig(model="toy", algo="cd-2")).delay == 2
    with pytest.raises(DistgnnError, match="--heads is an option of --model gat, not of --model toy"):
        check_config(TrainConfig(model="toy", heads=4))
    args = build_parser().parse_args(["train", "parts", "--model", "toy", "--hidden", "16"])
    assert config_from_args(args).model == "toy"
    args = build_parser().parse_args(["train", "parts", "--model", "toy", "--aggregator", "mean"])
    with pytest.raises(DistgnnError, match="--aggregator"):
        config_from_args(args)
    assert run_name("cd-0", "auto", "toy") == "toy-cd-0"

    shape = PartShape(n=1000, m=20_000, feat_dim=50, num_classes=7, multilabel=False, num_parts=2,
                      num_leaves=100, num_split=200, num_roots=900)
    estimate = estimate_shape(shape, 2, 16, "cd-0", model="toy")
    assert estimate.total > estimate.baseline and estimate.optimizer == 5 * 4 * (50 * 16 + 16 + 16 * 7 + 7)
    assert layer_widths(50, 16, 7, 2, "toy") == [(50, 16, 16), (16, 7, 7)]

    graph = GraphShape(num_nodes=1000, num_edges=20_000, feat_dim=50, num_classes=7)
    costs = ModelShape(2, 16, input_cache=False, model="toy")
    assert costs.agg_units(graph) == 2 * (16 + 7)
    assert costs.dense_units(graph) == 50 * 16 + 16 * 7
    model = build_model("toy", 50, 16, 7, 2)
    assert costs.num_parameters(graph) == sum(p.numel() for p in model.parameters())
    x = torch.randn(4, 50)
    assert model(x, lambda layer, h: h).shape == (4, 7)


@pytest.mark.mpi
def test_a_registered_model_trains_estimated_and_costed(tmp_path: Path) -> None:
    """The toy model of this file, registered here alone, trains through ``distgnn train`` under
    mpiexec (this file is the script: it registers the model and runs the CLI), with the memory
    check on, under cd-0 and the default cd-r; the run records it, and ``scaling-model
    estimate-memory`` and ``predict`` take it too."""
    from conftest import mpiexec, run_cli
    from distgnn.data.fetch import fetch

    graph = fetch("synth-reddit", root=tmp_path, scale=0.005, name="g")
    parts = tmp_path / "libra-2"
    assert run_cli("partition", graph, "--parts", "2", "--out", parts, "--quiet").returncode == 0
    common = ["--model", "toy", "--epochs", "3", "--threads", "1", "--hidden", "16", "--quiet"]
    argv = [["train", str(parts), "--out", str(tmp_path / algo), "--algo", algo, *common]
            for algo in ("cd-0", "cd-2")]
    argv.append(["scaling-model", "estimate-memory", str(parts), "--model", "toy", "--layers", "2",
                 "--hidden", "16", "--json"])
    argv.append(["scaling-model", "predict", "--calibration", str(REPO / "docs" / "scale-calibration.json"),
                 "--model", "toy", "--layers", "2", "--hidden", "16", "--parts", "1", "4", "--json"])
    proc = mpiexec(2, __file__, json.dumps(argv), module=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for algo in ("cd-0", "cd-2"):
        summary = json.loads((tmp_path / algo / "summary.json").read_text())
        assert summary["hyperparameters"]["model"] == "toy" and summary["epochs"] == 3, algo
    # the toy model is no layer stack of the registry's kind: cd-r at the root does not recompute
    assert summary["hyperparameters"]["recompute_budget"] is None
    printed, at = [], proc.stdout.find("[")   # rank 0 prints each estimate's rows
    while at >= 0:
        rows, end = json.JSONDecoder().raw_decode(proc.stdout, at)
        printed.append(rows)
        at = proc.stdout.find("[", end)
    estimates = next(rows for rows in printed if "estimate_bytes" in rows[0])
    assert len(estimates) == 2 and all(row["estimate_bytes"] > 0 for row in estimates)
    predictions = [row for row in next(rows for rows in printed if "algo" in rows[0])
                   if row["algo"] == "cd-5"]
    assert [row["P"] for row in predictions] == [1, 4] and predictions[1]["epoch_s"] > 0


def test_the_schema_check_names_a_list_that_differs() -> None:
    from distgnn.workflow_config import registry_mismatch

    schema = {"properties": {"train": {"properties": {"model": {"enum": ["sage", "gcn"]}}}}}
    assert "train.model lists sage, gcn; distgnn registers sage, gcn, gin, gat" in registry_mismatch(schema)


def test_registration_refusals(toy) -> None:
    from distgnn.errors import DistgnnError
    from distgnn.models import registry

    with pytest.raises(DistgnnError, match="registered already"):
        registry.register(toy)
    with pytest.raises(DistgnnError, match="no '-'"):
        registry.register(registry.ModelSpec("my-model", "", _toy_builder, norm="mean"))
    with pytest.raises(DistgnnError, match="norm must be one of"):
        registry.register(registry.ModelSpec("other", "", _toy_builder, norm="max"))
    with pytest.raises(DistgnnError, match="defaults to 8"):
        registry.register(registry.ModelSpec("other", "", _toy_builder, norm="sum",
                                             options=(registry.ModelOption("heads", 4, ""),)))
    with pytest.raises(DistgnnError, match="built in"):
        registry.unregister("gcn")
    with pytest.raises(DistgnnError, match="--model must be one of sage, gcn, gin, gat, toy"):
        registry.spec("nope")


if __name__ == "__main__":  # under mpiexec: register the toy model, then run each distgnn command
    from distgnn.cli import main
    from distgnn.models import registry

    from distgnn.commands.ranks import launcher_rank

    registry.register(toy_spec())
    for command in json.loads(sys.argv[1]):
        if command[0] != "train" and launcher_rank() != 0:
            continue   # one process prints the estimates: two would interleave their JSON
        status = main(command)
        if status:
            sys.exit(status)
