"""The vocabulary and the model registry (docs/design.md#models): the shared names load no torch,
the schema, the CLI and the registry name the same models, and a model registered from outside
the package (here, in a test) is accepted by the config check, estimated, costed and built
without any other file changing."""
from __future__ import annotations

import argparse
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


def test_schema_cli_and_registry_name_the_same_models() -> None:
    from distgnn.cli import build_parser
    from distgnn.models import registry
    from distgnn.train.config import TrainConfig
    from distgnn.vocabulary import AGGREGATORS, MODELS

    assert registry.names() == MODELS
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    train = schema["properties"]["train"]["properties"]
    assert tuple(train["model"]["enum"]) == MODELS
    assert train["model"]["default"] == TrainConfig.model == MODELS[0]
    assert tuple(train["aggregator"]["enum"]) == AGGREGATORS
    parser = build_parser()
    for path in (("train",), ("launch",), ("scaling-model", "predict"),
                 ("scaling-model", "estimate-memory")):
        assert _choices(parser, *path)["model"] == MODELS, path
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


@pytest.fixture
def toy():
    from distgnn.models import registry

    spec = registry.register(registry.ModelSpec("toy", "a test's model", _toy_builder, norm="mean",
                                                 input_cache=False))
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
    from distgnn.train.memory_estimate import PartShape, estimate_shape, layer_widths
    from distgnn.vocabulary import run_name

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
