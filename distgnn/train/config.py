"""Training settings and their checks: pure Python, so the CLI can build its parser and refuse bad
options without importing torch (docs/design.md#training)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from distgnn.errors import DistgnnError
from distgnn.models import registry
from distgnn.options import check_threads
from distgnn.vocabulary import (CUSTOM_PREFIX, PRECISION_CHOICES, Algorithm, check_precision,
                                parse_algorithm, resolve_apply)
from distgnn.exchange.rules import DEFAULT_RULE, FIRST_RULE
from distgnn.exchange.spec import ExchangeSpec, resolve_exchange, resolve_messages

#: keys added to the hyperparameters after checkpoints existed, with the value older ones meant
LATER_HYPERPARAMETERS = {"model": registry.FIRST_MODEL, "heads": 8, "fresh_copies": False,
                         "cdr_rule": FIRST_RULE, "recompute_budget": None,
                         # rows travelled in bfloat16 under --precision bf16, else float32
                         "message_precision": lambda saved: ("bf16" if saved.get("precision") == "bf16"
                                                             else "fp32"),
                         "message_group": 0}


@dataclass
class TrainConfig:
    """Hyperparameters (compared on --resume) and run settings. The defaults are those of the
    ``train`` section of config/config.yaml (a test keeps them equal), so ``distgnn train`` by hand
    and the workflow run the same experiment."""

    algo: str = "cd-0"
    #: a registered model (sage: GraphSAGE, gcn, gin, gat; distgnn/models/registry.py) or a user's
    #: ``custom:<class>`` (distgnn.train_model)
    model: str = registry.DEFAULT_MODEL
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
    #: fp32, bf16, or auto (resolved when the run starts: :func:`with_precision_resolved`)
    precision: str = "fp32"
    #: why the run's precision is what it is (set with the resolution; a run setting)
    precision_reason: str = ""
    #: how training rows travel: auto (the algorithm's default), fp32, bf16, int8, int4, int2
    #: (docs/design.md#message-precision)
    message_precision: str = "auto"
    #: integer widths: columns per scale (0: the whole row)
    message_group: int = 0
    input_cache: bool = True   #: compute layer 0's aggregate of the input features once
    apply: str = "auto"        #: where the dense work runs: auto, root or replicas
    #: cd-r under root: gradients travel back r steps late (None: the rule, on for cd-r at the
    #: root; False turns it off there)
    delayed_gradients: bool | None = None
    #: cd-r under root: the roots' rows reach the leaves every step (exact, with their adjoint);
    #: only the leaves' partials are delayed (docs/design.md#fresh-copies; None: on for GAT's
    #: attention, off elsewhere; False turns it off for GAT)
    fresh_copies: bool | None = None
    #: cd-r under root: the delayed-update rule (a registered name, distgnn/exchange/rules.py;
    #: docs/design.md#cdr-rules)
    cdr_rule: str = DEFAULT_RULE
    #: ``--cdr-rule`` recompute rules: at most this many leaf rows per root recompute (the
    #: leaves with the most local out-edges; inf: every leaf that is a source of local edges);
    #: None: the default (distgnn.exchange.rules.DEFAULT_RECOMPUTE_BUDGET)
    recompute_budget: float | None = None
    #: seconds without a heartbeat after which a rank counts as silent and the job is ended
    #: (distgnn/train/watchdog.py; 0: no watchdog). Not an epoch time limit.
    hang_timeout_s: float = 600.0
    #: features, CSR, transpose and torch's large buffers on 2 MB pages where the kernel allows
    #: (distgnn/host_memory.py); a run setting, not a hyperparameter
    huge_pages: bool = True
    #: node-local folder each rank copies its part to before loading (docs/design.md#staging);
    #: a run setting, not a hyperparameter
    stage_dir: str | None = None

    def exchange_spec(self) -> ExchangeSpec:
        """The run's exchange, resolved once (docs/design.md#exchange-spec); an option that does
        not apply is refused in one line. What the model contributes comes from its registry
        entry (a user's ``custom:`` module: no attention, no recomputation)."""
        model = None if self.model.startswith(CUSTOM_PREFIX) else registry.spec(self.model)
        # auto, not yet resolved, checks as fp32: every option that holds under one holds under both
        return resolve_exchange(self.algo, self.apply, delayed_gradients=self.delayed_gradients,
                                fresh_copies=self.fresh_copies, rule=self.cdr_rule,
                                recompute_budget=self.recompute_budget,
                                input_cache=self.input_cache, layers=self.layers,
                                layer_stack=model is not None and model.recomputes,
                                attention=model is not None and model.attention,
                                messages=self.message_precision, message_group=self.message_group,
                                precision="fp32" if self.precision == "auto" else self.precision)

    def hyperparameters(self) -> dict[str, Any]:
        """The settings a checkpoint must agree with (run length and I/O cadence may change);
        ``apply``, ``delayed_gradients``, ``fresh_copies``, ``recompute_budget`` and
        ``message_precision`` as the exchange spec resolved them."""
        keep = ("algo", "model", "heads", "layers", "hidden", "aggregator", "lr", "dropout", "weight_decay", "seed",
                "precision", "delayed_gradients", "fresh_copies", "cdr_rule", "recompute_budget", "message_group")
        out = {k: v for k, v in asdict(self).items() if k in keep}
        exchange = self.exchange_spec()
        out["apply"] = exchange.apply
        out["delayed_gradients"] = exchange.delayed_gradients
        out["fresh_copies"] = exchange.fresh_copies
        out["recompute_budget"] = exchange.recompute_budget
        out["message_precision"] = exchange.messages
        return out


def check_attention(config: TrainConfig, algorithm: Algorithm, who: str) -> None:
    """Refuse, in one line naming ``who``, what attention cannot run under: cd-r-orig, cd-r on
    the replicas and integer message widths (docs/design.md#gat)."""
    if algorithm.paper_rule:
        raise DistgnnError(f"{who}: {algorithm.name} has no attention rule; use cd-"
                           f"{algorithm.delay} (at the root)")
    if algorithm.delay > 0 and resolve_apply(config.apply, algorithm) != "root":
        raise DistgnnError(f"{who}: {algorithm.name} on the replicas has no attention "
                           f"rule; cd-<r> runs attention at the root (--apply auto or root)")
    try:  # the partials of a softmax take no integer width
        resolve_messages(algorithm, config.message_precision, config.message_group,
                         config.precision, attention=True)
    except DistgnnError as exc:
        raise DistgnnError(f"{who}: {exc}") from None


def check_config(config: TrainConfig) -> ExchangeSpec:
    """The exchange spec of a valid configuration; a bad option raises one line naming it
    (called before MPI starts, and again by every rank)."""
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
    check_precision(config.precision, PRECISION_CHOICES)
    exchange = config.exchange_spec()
    if not config.hang_timeout_s >= 0.0:
        raise DistgnnError(f"--hang-timeout must be >= 0 seconds (0: off), got {config.hang_timeout_s}")
    for option, every in (("--eval-every", config.eval_every),
                          ("--checkpoint-every", config.checkpoint_every)):
        if every < 0:
            raise DistgnnError(f"{option} must be >= 0 (0: never), got {every}")
    check_threads(config.threads)
    return exchange


def with_precision_resolved(config: TrainConfig, comm: Any) -> TrainConfig:
    """``config`` with ``precision`` resolved for this run and ``precision_reason`` saying why
    (docs/design.md#precision). ``auto`` asks every rank's CPU (a collective over ``comm``:
    every rank must call it) and takes bf16 only when all multiply bfloat16 natively."""
    import socket
    from dataclasses import replace

    from distgnn.cpu_precision import native_bf16_flag, resolve_precision

    flags: dict[str, str | None] = {}
    if config.precision == "auto":
        for host, flag in comm.allgather((socket.gethostname(), native_bf16_flag())):
            flags[host] = None if host in flags and flags[host] is None else flag
    precision, reason = resolve_precision(config.precision, flags)
    return replace(config, precision=precision, precision_reason=reason)
