"""cd-r's rules at the root (``--cdr-rule``): what a cd-<r> run under ``--apply root`` does while
its delayed messages have not yet arrived, where the stored input is aggregated and who computes
layer 1's source rows (docs/design.md#cdr-rules). Pure Python, so the CLI can name them without
importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from distgnn.errors import DistgnnError


@dataclass(frozen=True)
class CdrRule:
    """One rule: ``delayed`` (the first rule) changes nothing; the others add components."""

    name: str
    #: the first r steps of each summed layer run cd-0's exchange (blocking, with its adjoint) and
    #: keep what it delivered (every copy and every root's R) until the delayed messages replace it
    warm: bool = False
    #: layer 0 trains with the exact aggregate of the stored features computed once (the input
    #: cache, as cd-0 does): nothing of layer 0 moves in training and it is never stale
    input_cache: bool = False
    #: until every row has arrived, each root's aggregate is scaled to the mass of the rows
    #: present (the mean over the present edges for ``mean``), not divided by the full degree
    present: bool = False
    #: the leaves compute layer 1's source rows themselves, with today's weights, from the stored
    #: features and the exact input aggregate (sent once): layer 1 reads no copies (implies
    #: ``input_cache``)
    recompute: bool = False

#: every rule by name; ``delayed`` is the rule of runs and checkpoints made before the option
RULES = {rule.name: rule for rule in (
    CdrRule("delayed"),
    CdrRule("warm", warm=True),
    CdrRule("input", input_cache=True),
    CdrRule("warm-input", warm=True, input_cache=True),
    CdrRule("present", present=True),
    CdrRule("present-input", present=True, input_cache=True),
    CdrRule("recompute", recompute=True, input_cache=True),
    CdrRule("warm-recompute", warm=True, recompute=True, input_cache=True),
)}
#: the default of ``--recompute-budget`` (train.recompute_budget): recomputed leaf rows per root
DEFAULT_RECOMPUTE_BUDGET = 1.0
#: the default of ``--cdr-rule`` (train.cdr_rule)
DEFAULT_RULE = "recompute"


def parse_cdr_rule(name: str) -> CdrRule:
    """The rule called ``name``; an unknown one raises one line naming the known ones."""
    if name not in RULES:
        raise DistgnnError(f"--cdr-rule must be one of {', '.join(RULES)}, got {name!r}")
    return RULES[name]
