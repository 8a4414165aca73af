"""cd-r's rules at the root (``--cdr-rule``): what a cd-<r> run under ``--apply root`` does while
its delayed messages have not yet arrived, where the stored input is aggregated and who computes
layer 1's source rows (docs/design.md#cdr-rules).

A rule is one :class:`CdrRule` subclass, registered once (:func:`register_rule`): its class
attributes say what it is (the CLI's help, the config schema's enum, the exchange spec, the memory
estimate and the scaling model read them without importing torch), its hooks are what
:class:`~distgnn.exchange.root.RootAggregation` calls at each training step of a summed layer
(docs/design.md#rule-hooks). The built-in rules:

* ``recompute`` (the default): layer 0 trains on the exact input aggregate and the leaves compute
  layer 1's source rows themselves (:mod:`distgnn.exchange.recompute`);
* ``prompt``: recompute's, each message taken one step after its post, the delayed gradients
  held (:class:`Prompt`);
* ``delayed`` (the first rule): the messages alone; copies and remote parts zero until their first
  delivery; the least dense work.

This module imports no torch (a hook receives tensors and calls their methods): the CLI parser
names the rules without loading it.
"""
from __future__ import annotations

from typing import Any, ClassVar

from distgnn.errors import DistgnnError

#: what the hooks receive (named, not imported: the root imports this module): ``root`` the
#: :class:`~distgnn.exchange.root.RootAggregation`, ``state`` a layer's
#: :class:`~distgnn.exchange.delayed_sum.DelayedSumState`, ``schedule`` its
#: :class:`~distgnn.exchange.schedule.DelayedSchedule`, tensors torch tensors
RootAggregation = DelayedSumState = DelayedSchedule = Tensor = Any


class CdrRule:
    """The first rule (``delayed``), and the hooks every rule may override.

    One instance serves one run (:meth:`RootAggregation.__init__` makes it); per-layer state
    lives in the layer's :class:`~distgnn.exchange.delayed_sum.DelayedSumState` (``state.extra``,
    saved in checkpoints). Hooks run on every rank alike; only :meth:`setup` may be collective.
    """

    #: the ``--cdr-rule`` value; recorded in hyperparameters and checkpoints
    name: ClassVar[str] = "delayed"
    #: one line for ``--cdr-rule``'s help
    summary: ClassVar[str] = ("the messages alone: copies and remote parts zero until their first "
                              "delivery, then r to 2r - 1 epochs old; the least dense work")
    #: layer 0 trains on the exact aggregate of the stored features, computed once (the input
    #: cache, as cd-0): nothing of layer 0 moves in training and it is never stale
    input_cache: ClassVar[bool] = False
    #: the leaves compute layer 1's source rows themselves with today's weights (a built-in layer
    #: stack of two layers or more with the input cache, and no ``--fresh-copies``; elsewhere the
    #: rule acts without it); ``--recompute-budget`` bounds the rows
    recompute: ClassVar[bool] = False
    #: entries of ``state.extra`` with one row per row of the layer's source table (a checkpoint
    #: from before compact tables stores them over local ids)
    table_rows: ClassVar[tuple[str, ...]] = ()
    #: each message is taken at the step after its post, not r steps later, and :meth:`stride`
    #: chooses the bins of each step (docs/design.md#prompt-delivery)
    prompt: ClassVar[bool] = False
    #: delayed gradients held: each leaf row adds its last delivered gradient at every step, as
    #: the forward adds the last delivered R (docs/design.md#held-gradients)
    hold_gradients: ClassVar[bool] = False

    def stride(self, step: int, delay: int) -> int:
        """Under a prompt rule, the bins' stride at training ``step`` (1 to ``delay``: the bins b
        = step mod stride move); a pure function of ``step``, the same on every rank."""
        return delay

    def setup(self, root: RootAggregation) -> None:
        """Once per run, when the aggregation is built (collective on ``root.eval_comm``)."""

    def start(self, root: RootAggregation, state: DelayedSumState, delayed_copies: bool) -> None:
        """A summed layer's first training step: its state was just made (``delayed_copies``:
        its leaves read copies that the roots send in bins)."""

    def early(self, root: RootAggregation, layer: int, h: Tensor,
              state: DelayedSumState, stored: bool) -> Tensor | None:
        """The aggregate [n_roots, w] this step uses instead of the delayed one (advancing
        ``state.step``), or None (the delayed step runs). ``stored``: the layer reads the stored
        features."""
        return None

    def delivered(self, root: RootAggregation, schedule: DelayedSchedule,
                  state: DelayedSumState, step: int, copies_taken: bool) -> None:
        """At the start of ``step`` >= r (>= 1 under a prompt rule), after the messages posted
        at ``step - r`` (``step - 1``) were taken (``copies_taken``: copies arrived)."""

    def posted(self, root: RootAggregation, schedule: DelayedSchedule,
               state: DelayedSumState, step: int) -> None:
        """After this step's partials were posted (P > 1): what else travels with them."""

    def merge(self, root: RootAggregation, state: DelayedSumState, step: int,
              out: Tensor) -> Tensor:
        """The step's aggregate from ``out`` = the fresh partial plus R [n_roots, w]."""
        return out


class Recompute(CdrRule):
    """``recompute``: the first rule's messages, but layer 0 trains on the input cache and the
    leaves compute layer 1's source rows themselves. What it changes is set up when the
    aggregation is built (which leaf rows recompute, layer 1's pruned broadcast:
    :mod:`distgnn.exchange.recompute`), so no per-step hook is needed."""

    name = "recompute"
    summary = ("layer 0 trains on the exact aggregate of the stored features, computed once, and "
               "the leaves compute layer 1's source rows themselves (no copies move for them; "
               "--recompute-budget bounds the added dense work)")
    input_cache = True
    recompute = True


class Prompt(Recompute):
    """``prompt``: recompute's work and messages, each message taken at the step after its post
    (a delivered partial is 1 to r steps old, not r to 2r - 1), and the delayed gradients held:
    every leaf row adds its last delivered gradient at every step, as the forward adds the last
    delivered R (docs/design.md#prompt-delivery, docs/design.md#held-gradients)."""

    name = "prompt"
    summary = ("recompute's work and bytes, each message taken at the next step instead of r "
               "steps later (rows 1 to r steps old, not r to 2r - 1), and each leaf adding its "
               "last delivered gradient at every step")
    prompt = True
    hold_gradients = True


#: every registered rule by name, the built-in ones first
_RULES: dict[str, type[CdrRule]] = {}
#: the default of ``--cdr-rule`` (train.cdr_rule)
DEFAULT_RULE = "recompute"
#: the rule of runs and checkpoints made before ``--cdr-rule`` existed, and the rule in effect
#: wherever no cd-r rule applies (cd-0, 0c, cd-r-orig, the replicas, attention)
FIRST_RULE = "delayed"
#: the default of ``--recompute-budget`` (train.recompute_budget): recomputed leaf rows per root
DEFAULT_RECOMPUTE_BUDGET = 1.0


def register_rule(rule: type[CdrRule]) -> type[CdrRule]:
    """Add the rule class ``rule`` under its ``name`` (usable as a class decorator); a name taken
    or not ``[a-z][a-z0-9-]*`` is refused in one line."""
    import re

    if not (isinstance(rule, type) and issubclass(rule, CdrRule)):
        raise DistgnnError(f"register_rule: expected a CdrRule subclass, got {rule!r}")
    if not re.match(r"^[a-z][a-z0-9-]*$", rule.name):
        raise DistgnnError(f"cd-r rule name {rule.name!r}: expected lower case letters, digits and -")
    if rule.name in _RULES and _RULES[rule.name] is not rule:
        raise DistgnnError(f"cd-r rule {rule.name!r} is registered already")
    _RULES[rule.name] = rule
    return rule


def unregister_rule(name: str) -> None:
    """Remove a rule registered after import (a built-in one stays)."""
    if name in BUILT_IN:
        raise DistgnnError(f"cd-r rule {name!r} is built in")
    _RULES.pop(name, None)


def rule_names() -> tuple[str, ...]:
    """The registered rules' names (``--cdr-rule``'s choices), the default first."""
    return tuple(_RULES)


def rule_class(name: str) -> type[CdrRule]:
    """The rule registered as ``name``; an unknown one raises one line naming the known ones."""
    if name not in _RULES:
        raise DistgnnError(f"--cdr-rule must be one of {', '.join(_RULES)}, got {name!r}")
    return _RULES[name]


def rules_help() -> str:
    """``--cdr-rule``'s help: every registered rule with its summary."""
    return "; ".join(f"{name}: {cls.summary}" for name, cls in _RULES.items())


register_rule(Recompute)
register_rule(Prompt)
register_rule(CdrRule)
#: the rules distgnn ships (the config schema's enum lists exactly these; a test checks it)
BUILT_IN = rule_names()

