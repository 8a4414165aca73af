"""Training settings and their checks: pure Python, so the CLI can build its parser and refuse bad
options without importing torch (docs/design.md#training)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from distgnn.errors import DistgnnError
from distgnn.models import registry
from distgnn.options import check_threads
from distgnn.vocabulary import CUSTOM_PREFIX, Algorithm, check_precision, parse_algorithm, resolve_apply
from distgnn.train.cdr_rules import DEFAULT_RECOMPUTE_BUDGET, DEFAULT_RULE, CdrRule, parse_cdr_rule

#: the built-in models whose layer 0 runs on more rows than the roots (layer stacks; GAT's
#: attention has its own cd-r rule)
RECOMPUTING_MODELS = ("sage", "gcn", "gin")
#: keys added to the hyperparameters after checkpoints existed, with the value older ones meant
LATER_HYPERPARAMETERS = {"model": "sage", "heads": 8, "fresh_copies": False, "cdr_rule": "delayed",
                         "recompute_budget": None}


@dataclass
class TrainConfig:
    """Hyperparameters (compared on --resume) and run settings. The defaults are those of the
    ``train`` section of config/config.yaml (a test keeps them equal), so ``distgnn train`` by hand
    and the workflow run the same experiment."""

    algo: str = "cd-0"
    #: a registered model (sage: GraphSAGE, gcn, gin, gat; distgnn/models/registry.py) or a user's
    #: ``custom:<class>`` (distgnn.train_model)
    model: str = "sage"
    #: GAT's attention heads per hidden layer (like ``aggregator``, a model's own option: the
    #: registry's ModelOption of that name has the same default)
    heads: int = 8
    epochs: int = 20
    layers: int = 2
    hidden: int = 64
    aggregator: str = "mean"  #: GraphSAGE's (a model's own option, as ``heads``)
    lr: float = 0.01
    dropout: float = 0.5
    weight_decay: float = 0.0
    seed: int = 0
    eval_every: int = 2
    checkpoint_every: int = 10
    resume: bool = False
    threads: int = 0
    memory_check: bool = True
    precision: str = "fp32"
    input_cache: bool = True   #: compute layer 0's aggregate of the input features once
    apply: str = "auto"        #: where the dense work runs: auto, root or replicas
    #: cd-r under root: gradients travel back r steps late (None: the rule, on for cd-r at the
    #: root; False turns it off there)
    delayed_gradients: bool | None = None
    #: cd-r under root: the roots' rows reach the leaves every step (exact, with their adjoint);
    #: only the leaves' partials are delayed (docs/design.md#fresh-copies)
    fresh_copies: bool = False
    #: cd-r under root: the rule before the delayed messages arrive and for the stored input
    #: (distgnn/train/cdr_rules.py; docs/design.md#cdr-rules)
    cdr_rule: str = DEFAULT_RULE
    #: ``--cdr-rule`` recompute rules: at most this many leaf rows per root recompute (the
    #: leaves with the most local out-edges; inf: every leaf that is a source of local edges);
    #: None: DEFAULT_RECOMPUTE_BUDGET
    recompute_budget: float | None = None
    #: seconds without a heartbeat after which a rank counts as silent and the job is ended
    #: (distgnn/train/watchdog.py; 0: no watchdog). Not an epoch time limit.
    hang_timeout_s: float = 600.0
    #: features, CSR, transpose and torch's large buffers on 2 MB pages where the kernel allows
    #: (distgnn/memory.py); a run setting, not a hyperparameter
    huge_pages: bool = True
    #: node-local folder each rank copies its part to before loading (docs/design.md#staging);
    #: a run setting, not a hyperparameter
    stage_dir: str | None = None

    def cdr_rule_in_effect(self) -> CdrRule:
        """``cdr_rule`` where it applies (cd-<r> under root, summed layers: not GAT), else the
        first rule, which changes nothing (docs/design.md#cdr-rules)."""
        algorithm = parse_algorithm(self.algo)
        if (algorithm.delay > 0 and not algorithm.original and self.model != "gat"
                and resolve_apply(self.apply, algorithm) == "root"):
            return parse_cdr_rule(self.cdr_rule)
        return parse_cdr_rule("delayed")

    def recomputes(self) -> bool:
        """Whether the leaves recompute layer 1's source rows (``--cdr-rule`` recompute rules):
        cd-<r> under root, a built-in layer stack of two layers or more, the input cache on and
        no ``--fresh-copies`` (which makes every copy current already); elsewhere the rule's
        other components apply (docs/design.md#cdr-rules)."""
        return (self.cdr_rule_in_effect().recompute and not self.fresh_copies
                and self.input_cache and self.layers >= 2 and self.model in RECOMPUTING_MODELS)

    def recompute_rows_per_root(self) -> float | None:
        """The recompute budget in force (leaf rows per root, inf: every source leaf), None
        where the leaves do not recompute (:meth:`recomputes`)."""
        if not self.recomputes():
            return None
        return DEFAULT_RECOMPUTE_BUDGET if self.recompute_budget is None else self.recompute_budget

    def hyperparameters(self) -> dict[str, Any]:
        """The settings a checkpoint must agree with (run length and I/O cadence may change);
        ``apply`` as resolved (``root`` or ``replicas``)."""
        keep = ("algo", "model", "heads", "layers", "hidden", "aggregator", "lr", "dropout", "weight_decay", "seed",
                "precision", "delayed_gradients", "fresh_copies", "cdr_rule", "recompute_budget")
        out = {k: v for k, v in asdict(self).items() if k in keep}
        algorithm = parse_algorithm(self.algo)
        out["apply"] = resolve_apply(self.apply, algorithm)
        out["delayed_gradients"] = resolve_delayed_gradients(self.delayed_gradients, algorithm,
                                                             out["apply"])
        out["recompute_budget"] = self.recompute_rows_per_root()
        return out


def resolve_delayed_gradients(value: bool | None, algorithm: Algorithm, apply: str) -> bool:
    """Whether cd-r's gradients travel back (docs/design.md#cd-r-at-the-root): by default for cd-r at the
    root, never elsewhere; asking for them where they do not apply is refused in one line."""
    applies = algorithm.delay > 0 and not algorithm.original and apply == "root"
    if value and not applies:
        raise DistgnnError(f"--delayed-gradients: only for cd-<r> under --apply root (got "
                           f"{algorithm.name} under {apply})")
    return applies if value is None else bool(value)


def check_attention(config: TrainConfig, algorithm: Algorithm, who: str) -> None:
    """Refuse, in one line naming ``who``, what attention cannot run under: cd-r-orig, cd-r on
    the replicas and bf16 (docs/design.md#gat)."""
    if algorithm.original:
        raise DistgnnError(f"{who}: {algorithm.name} has no attention rule; use cd-"
                           f"{algorithm.delay} (at the root)")
    if algorithm.delay > 0 and resolve_apply(config.apply, algorithm) != "root":
        raise DistgnnError(f"{who}: {algorithm.name} on the replicas has no attention "
                           f"rule; cd-<r> runs attention at the root (--apply auto or root)")
    if config.precision != "fp32":
        raise DistgnnError(f"{who}: --precision bf16 is not supported for attention yet (use fp32)")


def check_config(config: TrainConfig) -> Algorithm:
    """The algorithm of a valid configuration; a bad option raises one line naming it (called
    before MPI starts, and again by every rank)."""
    algorithm = parse_algorithm(config.algo)
    if config.epochs < 1:
        raise DistgnnError(f"--epochs must be >= 1, got {config.epochs}")
    if config.layers < 1:
        raise DistgnnError(f"--layers must be >= 1, got {config.layers}")
    if config.hidden < 1:
        raise DistgnnError(f"--hidden must be >= 1, got {config.hidden}")
    spec = None if config.model.startswith(CUSTOM_PREFIX) else registry.spec(config.model)
    for option in registry.all_options().values():  # the models' own options (registry.py)
        value = getattr(config, option.name)
        option.check(value)
        registry.check_options(config.model, {option.name: None if value == option.default else value})
    if spec is not None and spec.attention:
        check_attention(config, algorithm, f"--model {config.model}")
    if not 0.0 <= config.dropout < 1.0:
        raise DistgnnError(f"--dropout must lie in [0, 1), got {config.dropout}")
    if not (config.lr > 0.0 and math.isfinite(config.lr)):
        raise DistgnnError(f"--lr must be a positive number, got {config.lr}")
    if not config.weight_decay >= 0.0:
        raise DistgnnError(f"--weight-decay must be >= 0, got {config.weight_decay}")
    check_precision(config.precision)
    if config.fresh_copies and not (algorithm.delay > 0 and not algorithm.original
                                    and resolve_apply(config.apply, algorithm) == "root"):
        raise DistgnnError(f"--fresh-copies: only for cd-<r> under --apply root (got {algorithm.name} "
                           f"under {resolve_apply(config.apply, algorithm)})")
    resolve_delayed_gradients(config.delayed_gradients, algorithm,
                              resolve_apply(config.apply, algorithm))
    parse_cdr_rule(config.cdr_rule)
    if config.cdr_rule != DEFAULT_RULE:
        if not (algorithm.delay > 0 and not algorithm.original
                and resolve_apply(config.apply, algorithm) == "root"):
            raise DistgnnError(f"--cdr-rule: only for cd-<r> under --apply root (got "
                               f"{config.cdr_rule} for {algorithm.name} under "
                               f"{resolve_apply(config.apply, algorithm)})")
        if config.model == "gat":
            raise DistgnnError(f"--cdr-rule {config.cdr_rule}: GAT's attention has one cd-r rule "
                               f"(drop --cdr-rule)")
    if config.recompute_budget is not None:
        if not config.recomputes():
            raise DistgnnError(f"--recompute-budget: only where the leaves recompute (a --cdr-rule "
                               f"that recomputes, cd-<r> under --apply root, model sage, gcn or "
                               f"gin with --layers >= 2, the input cache on, no --fresh-copies; "
                               f"docs/design.md#cdr-rules)")
        if not config.recompute_budget >= 0:  # (refuses nan too)
            raise DistgnnError(f"--recompute-budget must be a number >= 0 (leaf rows per root; "
                               f"inf: every leaf), got {config.recompute_budget}")
    if not config.hang_timeout_s >= 0.0:
        raise DistgnnError(f"--hang-timeout must be >= 0 seconds (0: off), got {config.hang_timeout_s}")
    for option, every in (("--eval-every", config.eval_every),
                          ("--checkpoint-every", config.checkpoint_every)):
        if every < 0:
            raise DistgnnError(f"{option} must be >= 0 (0: never), got {every}")
    check_threads(config.threads)
    return algorithm
