"""The models ``--model`` names: each one is a :class:`ModelSpec`, registered once, that says
everything the rest of distgnn needs of it (docs/design.md#model-registry):

* how to build it (``builder``: its torch module, imported only when a model is built);
* the ``norm`` of its aggregate and whether it runs attention (the config check) or takes the
  input cache;
* its own ``distgnn train`` options (:class:`ModelOption`: ``--aggregator`` is GraphSAGE's,
  ``--heads`` GAT's): the CLI adds them, the config check refuses them for another model, the
  workflow passes them for this model only;
* its shape: layer widths, parameter count, dense work and the activations autograd keeps, which
  the memory estimate (:mod:`distgnn.scaling.rank_memory`) and the scaling model's costs
  (:mod:`distgnn.scaling.costs`) read.

This module imports neither torch nor numpy: the CLI parser, the config check, the launcher's
memory check, the scaling model and the Snakefile read the specs without loading torch (about
10 s of start-up on a busy node). The built-in models' specs are at the end of this file; their
names are :data:`BUILT_IN` and the default :data:`DEFAULT_MODEL`, whose run folders carry no model
prefix (:func:`run_name`). A user's own module trained through ``distgnn.train_model``
(``custom:<class>``) is not registered: it is estimated as the default model (:func:`shape_spec`).
A model registered from outside (:func:`register`) trains, is estimated and is costed like a
built-in one (tests/test_registry.py registers one from the test file alone).
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

from distgnn.errors import DistgnnError
from distgnn.vocabulary import AGGREGATORS, CUSTOM_PREFIX, NORMS, parse_algorithm, resolve_apply

#: (in, out, aggregation width) of every layer
Widths = list[tuple[int, int, int]]
#: a registered name: lower case, no ``-`` (run folders are ``<model>-<algo>``) and no ``:``
NAME = re.compile(r"^[a-z][a-z0-9_]*$")
#: a user's model class by import path: ``package.module:Class``
IMPORT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModelOption:
    """A model's own ``distgnn train`` option ``--<name>``: a :class:`~distgnn.train.config.TrainConfig`
    field of that name with this default (a test keeps them equal), refused for a model that does
    not declare it."""

    name: str
    default: Any
    help: str                              #: the CLI help, before "(--model X only; default: D)"
    choices: tuple[Any, ...] | None = None
    minimum: int | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> None:
        """One line naming the option when ``value`` is not one it takes."""
        if self.choices is not None and value not in self.choices:
            allowed = " or ".join([", ".join(map(str, self.choices[:-1])), str(self.choices[-1])]
                                  if len(self.choices) > 1 else [str(self.choices[0])])
            raise DistgnnError(f"{self.flag} must be {allowed}, got {value}")
        if self.minimum is not None and value < self.minimum:
            raise DistgnnError(f"{self.flag} must be >= {self.minimum}, got {value}")


def narrowing_widths(feat_dim: int, hidden: int, num_classes: int, layers: int, **_: Any) -> Widths:
    """[feat_dim, hidden, ..., hidden, num_classes]; each layer aggregates at the narrower of its
    widths (its linear map first when it narrows, :func:`distgnn.models.base.linear_first`)."""
    dims = [feat_dim] + [hidden] * (layers - 1) + [num_classes]
    return [(dims[i], dims[i + 1], dims[i + 1] if dims[i] > dims[i + 1] else dims[i])
            for i in range(layers)]


def width_products(widths: Widths, hidden: int) -> int:
    """Width products per vertex of one epoch's dense work: one in x out map per layer."""
    return sum(i * o for i, o, _ in widths)


def one_map_per_layer(widths: Widths, hidden: int) -> int:
    """Parameters of one in x out weight and an out bias per layer."""
    return sum(i * o + o for i, o, _ in widths)


def no_extra_activations(widths: Widths, hidden: int) -> int:
    return 0


@dataclass(frozen=True)
class ModelSpec:
    """What distgnn needs of a model (module docstring). The shape functions take plain ints:
    ``widths(feat_dim, hidden, num_classes, layers, **options)`` gets the model's own options."""

    name: str
    #: one line for ``--model``'s help
    summary: str
    #: ``"module:attribute"`` (imported when a model is built) or a callable;
    #: ``builder(in_dim, hidden, out_dim, layers, dropout=..., **options) -> torch.nn.Module``
    builder: Union[str, Callable[..., Any]]
    #: the ``norm`` of its aggregate (one of :data:`~distgnn.vocabulary.NORMS`), or a function of
    #: its options (GraphSAGE: its ``aggregator``)
    norm: Union[str, Callable[..., str]]
    options: tuple[ModelOption, ...] = ()
    #: (in, out, aggregation width) per layer
    widths: Callable[..., Widths] = narrowing_widths
    #: parameter count from ``(widths, hidden)``
    parameters: Callable[[Widths, int], int] = one_map_per_layer
    #: width products per vertex per epoch (the scaling model's dense work units)
    dense_units: Callable[[Widths, int], int] = width_products
    #: floats per dense row that autograd keeps beyond the estimate's common count (two per hidden
    #: width, the logits): GIN's MLPs keep their input and hidden layer
    extra_activations: Callable[[Widths, int], int] = no_extra_activations
    #: its widest layer keeps a working set with one row per local vertex even at the root (GAT's
    #: attention partials); otherwise one per dense row
    local_working_set: bool = False
    #: layer 0 may take the input cache (its aggregate of x computed once)
    input_cache: bool = True
    #: runs through ``attend`` (the config check's attention rules apply, docs/design.md#gat)
    attention: bool = False
    #: a stack of per-vertex layers (:class:`distgnn.models.base.LayerStack`) whose layer 0 may
    #: run on more rows than the roots: cd-r's recompute rule lets leaves recompute layer 1's
    #: input (docs/design.md#cdr-rules); GAT's attention has its own rule
    recomputes: bool = True

    def option_values(self, source: Any = None, **given: Any) -> dict[str, Any]:
        """This model's options: from ``given`` (other models' options ignored), else from the
        attributes of ``source`` (a TrainConfig, parsed arguments; None counts as unset), else
        their defaults."""
        values = {}
        for option in self.options:
            value = given.get(option.name, getattr(source, option.name, None))
            values[option.name] = option.default if value is None else value
        return values

    def norm_of(self, **options: Any) -> str:
        return self.norm(**self.option_values(**options)) if callable(self.norm) else self.norm

    def layer_widths(self, feat_dim: int, hidden: int, num_classes: int, layers: int,
                     **options: Any) -> Widths:
        return self.widths(feat_dim, hidden, num_classes, layers, **self.option_values(**options))

    def num_parameters(self, feat_dim: int, hidden: int, num_classes: int, layers: int,
                       **options: Any) -> int:
        return self.parameters(self.layer_widths(feat_dim, hidden, num_classes, layers, **options), hidden)

    def build(self, in_dim: int, hidden: int, out_dim: int, layers: int, dropout: float = 0.5,
              **options: Any) -> Any:
        """The torch module (``options``: this model's; other models' are ignored)."""
        builder = self.builder
        if isinstance(builder, str):
            module, _, attribute = builder.partition(":")
            builder = getattr(importlib.import_module(module), attribute)
        return builder(in_dim, hidden, out_dim, layers, dropout=dropout, **self.option_values(**options))


_SPECS: dict[str, ModelSpec] = {}


def register(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` under its name (refused: a name taken, or not ``[a-z][a-z0-9_]*``; a norm not
    in NORMS; an option declared by another model with another default)."""
    if not NAME.match(spec.name):
        raise DistgnnError(f"model name {spec.name!r}: expected lower case letters, digits and _ "
                           f"(no '-' or ':')")
    if spec.name in _SPECS:
        raise DistgnnError(f"model {spec.name!r} is registered already")
    if isinstance(spec.norm, str) and spec.norm not in NORMS:
        raise DistgnnError(f"model {spec.name!r}: norm must be one of {', '.join(NORMS)}, got {spec.norm!r}")
    for option in spec.options:
        other = all_options().get(option.name)
        if other is not None and other.default != option.default:
            raise DistgnnError(f"model {spec.name!r}: {option.flag} defaults to {other.default!r} "
                               f"for another model, not {option.default!r}")
    _SPECS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a model registered after import (a built-in one stays)."""
    if name in BUILT_IN:
        raise DistgnnError(f"model {name!r} is built in")
    _SPECS.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered names, the built-in ones first (``--model``'s choices)."""
    return tuple(_SPECS)


def is_import_path(name: str) -> bool:
    """Whether ``name`` names a user's model class by import path (``package.module:Class``)."""
    return bool(IMPORT_PATH.match(name)) and not name.startswith(CUSTOM_PREFIX)


def spec(name: str) -> ModelSpec:
    """The spec registered as ``name``, or that of a user's class named by import path
    (:func:`imported_spec`); anything else is refused in one line."""
    try:
        return _SPECS[name]
    except KeyError:
        pass
    if is_import_path(name):
        return imported_spec(name)
    raise DistgnnError(f"--model must be one of {', '.join(_SPECS)} or a class's import path "
                       f"package.module:Class, got {name!r}")


_IMPORTED: dict[str, ModelSpec] = {}


def imported_spec(path: str) -> ModelSpec:
    """The spec of a user's model class named ``package.module:Class`` (docs/design.md#own-model):
    built as ``Class(in_dim, hidden, classes)`` plus ``layers=`` and ``dropout=`` where its
    constructor takes them; its ``norm`` attribute says what its aggregate computes. distgnn does
    not know its shape: the memory estimate and the scaling model take the default model's. The
    module is imported here, so it must be importable where every rank runs (installed, or on
    ``PYTHONPATH``)."""
    if path in _IMPORTED:
        return _IMPORTED[path]
    module, _, attribute = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise DistgnnError(f"--model {path}: cannot import {attribute} from {module} ({exc}); the "
                           f"module must be importable on every rank (installed, or on PYTHONPATH)") from None
    norm = getattr(cls, "norm", None)
    if not isinstance(cls, type) or norm not in NORMS:
        raise DistgnnError(f"--model {path}: expected a torch module class with a norm attribute "
                           f"({', '.join(NORMS)}; docs/design.md#own-model), got {norm!r}")
    _IMPORTED[path] = ModelSpec(
        name=path, summary=f"{attribute} from {module}", builder=_constructor(cls), norm=norm,
        input_cache=bool(getattr(cls, "takes_input_aggregate", False)),
        attention=bool(getattr(cls, "uses_attention", False)), recomputes=False)
    return _IMPORTED[path]


def _constructor(cls: type) -> Callable[..., Any]:
    """``builder(in_dim, hidden, out_dim, layers, dropout=...)`` for a user's class, passing
    ``layers`` and ``dropout`` only where its constructor takes them."""
    import inspect

    accepted = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())

    def build(in_dim: int, hidden: int, out_dim: int, layers: int, dropout: float = 0.5, **_: Any) -> Any:
        extra = {k: v for k, v in (("layers", layers), ("dropout", dropout)) if takes_any or k in accepted}
        return cls(in_dim, hidden, out_dim, **extra)

    return build


def shape_spec(name: str) -> ModelSpec:
    """The spec whose shape stands for ``name``: its own, or the default model's (GraphSAGE) for a
    user's ``custom:<class>`` module, whose shape distgnn does not know."""
    return spec(DEFAULT_MODEL if name.startswith(CUSTOM_PREFIX) or is_import_path(name) else name)


def run_prefix(model: str | None) -> str:
    """What a run folder's name starts with for ``model``: nothing for the default model, else its
    name and ``-`` (a user's class, ``custom:Net`` or ``package.module:Net``: ``Net-``)."""
    return "" if model in (None, DEFAULT_MODEL) else f"{model.split(':')[-1]}-"


def run_name(algo: str, apply: str = "auto", model: str | None = None) -> str:
    """Run folder name: the algorithm, plus ``-<apply>`` when ``--apply`` resolves to another mode
    than the algorithm's default (so runs of both modes coexist: ``cd-0``, ``cd-0-replicas``;
    ``--apply root`` for cd-0 is the default computation and shares ``cd-0``), after ``<model>-``
    for a model other than the default (``gcn-cd-0``; a user's model ``custom:Net`` or
    ``package.module:Net``: ``Net-cd-0``).
    ``model`` None: the default model."""
    prefix = run_prefix(model)
    try:
        default = resolve_apply("auto", parse_algorithm(algo))
        resolved = resolve_apply(apply, parse_algorithm(algo))
    except DistgnnError:
        return prefix + (algo if apply == "auto" else f"{algo}-{apply}")
    return prefix + (algo if resolved == default else f"{algo}-{resolved}")


def all_options() -> dict[str, ModelOption]:
    """Every registered model's own options by name (the CLI adds each once)."""
    found: dict[str, ModelOption] = {}
    for s in _SPECS.values():
        for option in s.options:
            found.setdefault(option.name, option)
    return found


def takers(option: str) -> tuple[str, ...]:
    """The registered models that take ``option``."""
    return tuple(s.name for s in _SPECS.values() if any(o.name == option for o in s.options))


def check_options(model: str, given: Mapping[str, Any]) -> None:
    """Refuse, in one line, an option in ``given`` (name -> value; None: not given) that ``model``
    does not take (a user's ``custom:`` module takes none)."""
    own = set() if model.startswith(CUSTOM_PREFIX) else {o.name for o in spec(model).options}
    for name, value in given.items():
        if value is not None and name not in own:
            flag = all_options()[name].flag
            raise DistgnnError(f"{flag} is an option of --model {' and '.join(takers(name))}, not of "
                               f"--model {model} (drop {flag})")


def build_model(model: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                dropout: float = 0.5, **options: Any) -> Any:
    """The ``--model`` network for ``in_dim`` input columns and ``out_dim`` classes (``options``:
    the model's own, e.g. ``aggregator`` for sage, ``heads`` for gat; an option no model takes is
    refused)."""
    unknown = sorted(set(options) - set(all_options()))
    if unknown:
        raise DistgnnError(f"build_model: no model takes the option {unknown[0]!r}")
    return spec(model).build(in_dim, hidden, out_dim, layers, dropout=dropout, **options)


# --- the built-in models (modules: distgnn/models/<name>.py); the first is the default ---

#: the model runs get when ``--model`` is not given (config ``train.model``); its run folders
#: carry no model prefix
DEFAULT_MODEL = "sage"
#: the model of runs and checkpoints made before ``--model`` existed
FIRST_MODEL = "sage"

def _gin_widths(feat_dim: int, hidden: int, num_classes: int, layers: int) -> Widths:
    """GIN aggregates at its input width (its MLP is not linear, so it cannot map first)."""
    dims = [feat_dim] + [hidden] * (layers - 1) + [num_classes]
    return [(dims[i], dims[i + 1], dims[i]) for i in range(layers)]


def _gat_widths(feat_dim: int, hidden: int, num_classes: int, layers: int, heads: int) -> Widths:
    """GAT's heads x hidden rows plus one score per head (one head in the output layer; cd-r's
    input form, docs/design.md#input-form, is never wider)."""
    dims = [feat_dim] + [hidden * heads] * (layers - 1) + [num_classes]
    return [(dims[i], dims[i + 1], dims[i + 1] + (heads if i < layers - 1 else 1)) for i in range(layers)]


register(ModelSpec(
    "sage", "GraphSAGE", "distgnn.models.sage:GraphSAGE", norm=lambda aggregator: aggregator,
    options=(ModelOption("aggregator", "mean", "GraphSAGE's neighbour normalisation",
                         choices=AGGREGATORS),),
    # fc_neigh and fc_self weights, fc_self's bias (mean; also the estimate of a user's model)
    parameters=lambda widths, hidden: sum(2 * i * o + o for i, o, _ in widths)))
register(ModelSpec(
    "gcn", "GCN, D^-1/2 (A + I) D^-1/2", "distgnn.models.gcn:GCN", norm="sym",
    parameters=one_map_per_layer))
register(ModelSpec(
    "gin", "GIN with a learned eps and a two-layer MLP per layer", "distgnn.models.gin:GIN",
    norm="sum", widths=_gin_widths,
    # the MLP's two linear maps and eps
    parameters=lambda widths, hidden: sum(i * hidden + hidden + hidden * o + o + 1 for i, o, _ in widths),
    dense_units=lambda widths, hidden: sum(i * hidden + hidden * o for i, o, _ in widths),
    # each MLP keeps its input and its hidden layer before and after the ReLU
    extra_activations=lambda widths, hidden: sum(i + 2 * hidden for i, _, _ in widths)))
register(ModelSpec(
    "gat", "GAT, multi-head attention (cd-0, 0c, cd-<r> at the root)", "distgnn.models.gat:GAT",
    norm="sum",  # its aggregate callable is not used; attend is
    options=(ModelOption("heads", 8, "GAT's attention heads per hidden layer, --hidden wide each",
                         minimum=1),),
    widths=_gat_widths,
    parameters=lambda widths, hidden: sum(i * o + 3 * o for i, o, _ in widths),  # fc, attn_l, attn_r, bias
    local_working_set=True, input_cache=False, attention=True, recomputes=False))

#: the models distgnn ships, the default first (the config schema's enum lists exactly these:
#: distgnn.workflow_config.check_schema_names)
BUILT_IN = names()
