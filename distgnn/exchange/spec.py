"""A run's exchange, resolved once: :class:`ExchangeSpec` owns every fact derived from the
algorithm and its options (where the dense work runs, the delay, the cd-r rule in effect, delayed
gradients, fresh copies, the recompute budget, how training rows travel). The trainer builds its aggregation from it
(:func:`distgnn.exchange.build_aggregation`), the memory estimate and the scaling model read the
same spec, and a checkpoint records what it resolved to (docs/design.md#exchange-spec).

Pure Python, so the CLI resolves (and refuses) options before torch is loaded.
"""
from __future__ import annotations

from dataclasses import dataclass

from distgnn.errors import DistgnnError
from distgnn.exchange.rules import (DEFAULT_RECOMPUTE_BUDGET, DEFAULT_RULE, FIRST_RULE, CdrRule,
                                    rule_class)
from distgnn.vocabulary import (MESSAGE_BITS, Algorithm, check_message_precision, check_precision,
                                parse_algorithm, resolve_apply)


def cdr_at_root(algorithm: Algorithm, apply: str) -> bool:
    """The one predicate "cd-r at the root": distgnn's cd-<r> with the dense work at the roots
    (``apply`` resolved). Only there do ``--cdr-rule``, ``--fresh-copies``, delayed gradients and
    ``--recompute-budget`` apply."""
    return algorithm.cdr_variant and apply == "root"


@dataclass(frozen=True)
class ExchangeSpec:
    """How one run exchanges rows (module docstring); make it with :func:`resolve_exchange`."""

    algorithm: Algorithm
    apply: str                     #: ``root`` or ``replicas``
    #: cd-r at the root: each exchange's gradient travels back r steps late
    delayed_gradients: bool
    #: cd-r at the root: the broadcast is cd-0's every step (docs/design.md#fresh-copies; by
    #: default for GAT's attention, off elsewhere)
    fresh_copies: bool
    #: the rule in effect (the first rule, which changes nothing, where no cd-r rule applies)
    rule: type[CdrRule]
    #: layer 0's exact input aggregate computed once (``--no-input-cache``: False)
    input_cache: bool
    #: leaf rows per root that recompute layer 1's input (inf: every source leaf); None where the
    #: leaves do not recompute
    recompute_budget: float | None
    #: how training rows travel: fp32, bf16, int8, int4 or int2 (docs/design.md#message-precision)
    messages: str = "fp32"
    #: integer widths: columns per scale and low value (0: one pair per row)
    message_group: int = 0

    @property
    def delay(self) -> int:
        return self.algorithm.delay

    @property
    def at_root(self) -> bool:
        """The dense work runs once per vertex, at its root."""
        return self.apply == "root"

    @property
    def cdr_at_root(self) -> bool:
        """cd-<r> under ``--apply root`` (:func:`cdr_at_root`)."""
        return cdr_at_root(self.algorithm, self.apply)

    @property
    def recomputes(self) -> bool:
        """Whether the leaves recompute layer 1's source rows."""
        return self.recompute_budget is not None

    def trains_on_input_cache(self, parts: int) -> bool:
        """Whether layer 0 trains on the exact input aggregate computed once: cd-0, one rank, or
        a rule that says so."""
        return self.algorithm.trains_with_input_cache(parts) or self.rule.input_cache


#: cd-r's width under ``--message-precision auto`` (GraphSAGE, GCN, GIN and a user's model):
#: the lowest width that met the accuracy targets on every cell of the grid
#: (docs/delayed-updates.md#message-precision)
DEFAULT_CDR_MESSAGES = "fp32"


def default_messages(algorithm: Algorithm, precision: str = "fp32", attention: bool = False) -> str:
    """``--message-precision auto``: cd-0 float32 (its promise is exactness), cd-<r>
    :data:`DEFAULT_CDR_MESSAGES` (already approximate); bfloat16 instead of float32 under
    ``--precision bf16``; attention (GAT) never an integer width."""
    full = "bf16" if precision == "bf16" else "fp32"
    if algorithm.cdr_variant and not attention and DEFAULT_CDR_MESSAGES in MESSAGE_BITS:
        return DEFAULT_CDR_MESSAGES
    return full


def resolve_messages(algorithm: Algorithm, messages: str = "auto", group: int = 0,
                     precision: str = "fp32", attention: bool = False) -> tuple[str, int]:
    """(width, group) of ``--message-precision`` and ``--message-group``, refused in one line
    where they do not apply (``attention``: GAT, whose partials take no integer width)."""
    check_message_precision(messages)
    check_precision(precision)
    resolved = default_messages(algorithm, precision, attention) if messages == "auto" else messages
    if not algorithm.exchange and resolved not in ("fp32", default_messages(algorithm, precision)):
        raise DistgnnError(f"--message-precision {messages}: {algorithm.name} sends no training "
                           f"rows (drop the option)")
    if attention and resolved in MESSAGE_BITS:
        raise DistgnnError(f"--message-precision {resolved}: GAT's attention partials (a softmax's "
                           f"max, sum and weighted sum, -inf where a row has no edge) travel in "
                           f"fp32 or bf16 only (docs/design.md#message-precision)")
    if not (isinstance(group, int) and group >= 0):
        raise DistgnnError(f"--message-group must be an integer >= 0 (columns per scale; 0: the "
                           f"whole row), got {group!r}")
    if group and resolved not in MESSAGE_BITS:
        raise DistgnnError(f"--message-group: only with an integer --message-precision "
                           f"({', '.join(MESSAGE_BITS)}), got {resolved}")
    return resolved, group


def resolve_exchange(algo: str | Algorithm, apply: str = "auto", *,
                     delayed_gradients: bool | None = None, fresh_copies: bool | None = None,
                     rule: str = DEFAULT_RULE, recompute_budget: float | None = None,
                     input_cache: bool = True, layers: int = 2, layer_stack: bool = True,
                     attention: bool = False, messages: str = "auto", message_group: int = 0,
                     precision: str = "fp32") -> ExchangeSpec:
    """The spec of ``algo`` under these options, each as ``distgnn train`` names it; an option
    that does not apply is refused in one line naming it. What the model contributes:
    ``layers``, ``layer_stack`` (a built-in layer stack, whose layer 0 may run on more rows than
    the roots) and ``attention`` (GAT: one cd-r rule, its own). ``fresh_copies`` None: on for
    attention under cd-r at the root, whose stale source copies do not train
    (docs/design.md#fresh-copies), off elsewhere."""
    algorithm = algo if isinstance(algo, Algorithm) else parse_algorithm(algo)
    apply = resolve_apply(apply, algorithm)
    at_root = cdr_at_root(algorithm, apply)
    where = f"got {algorithm.name} under {apply}"
    if fresh_copies and not at_root:
        raise DistgnnError(f"--fresh-copies: only for cd-<r> under --apply root ({where})")
    if fresh_copies is None:
        fresh_copies = at_root and attention
    if delayed_gradients and not at_root:
        raise DistgnnError(f"--delayed-gradients: only for cd-<r> under --apply root ({where})")
    chosen = rule_class(rule)
    if rule != DEFAULT_RULE:
        if not at_root:
            raise DistgnnError(f"--cdr-rule: only for cd-<r> under --apply root (got {rule} for "
                               f"{algorithm.name} under {apply})")
        if attention:
            raise DistgnnError(f"--cdr-rule {rule}: GAT's attention has one cd-r rule (drop --cdr-rule)")
    in_effect = chosen if at_root and not attention else rule_class(FIRST_RULE)
    recomputes = (in_effect.recompute and not fresh_copies and input_cache and layers >= 2
                  and layer_stack)
    if recompute_budget is not None:
        if not recomputes:
            raise DistgnnError("--recompute-budget: only where the leaves recompute (a --cdr-rule "
                               "that recomputes, cd-<r> under --apply root, a built-in layer "
                               "stack (sage, gcn, gin) with --layers >= 2, the input cache on, no "
                               "--fresh-copies; docs/design.md#cdr-rules)")
        if not recompute_budget >= 0:  # (refuses nan too)
            raise DistgnnError(f"--recompute-budget must be a number >= 0 (leaf rows per root; "
                               f"inf: every leaf), got {recompute_budget}")
    budget = None
    if recomputes:
        budget = DEFAULT_RECOMPUTE_BUDGET if recompute_budget is None else recompute_budget
    width, group = resolve_messages(algorithm, messages, message_group, precision, attention)
    return ExchangeSpec(algorithm, apply,
                        at_root if delayed_gradients is None else bool(delayed_gradients),
                        bool(fresh_copies), in_effect, bool(input_cache), budget, width, group)
