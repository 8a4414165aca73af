"""distgnn's vocabulary: the names every layer shares, in one module that imports neither torch nor
numpy (the CLI parser, the Snakefile and the report import it; a test checks that it stays so).

* the algorithms (``--algo``): their grammar :data:`ALGO_PATTERN`, :func:`parse_algorithm` and
  what each one does (:class:`Algorithm`), the first steady-state epoch (:func:`steady_start`);
* where the dense work runs (``--apply``): :data:`APPLY_MODES`, :func:`resolve_apply`;
* the aggregation normalisations :data:`NORMS` (and :data:`SELF_TERM_NORMS`), GraphSAGE's
  :data:`AGGREGATORS`, the precisions :data:`PRECISIONS` and :data:`MESSAGE_PRECISIONS`;
* how a user's own model is named (:data:`CUSTOM_PREFIX`); the models themselves, their names and
  the default one are the registry's (:mod:`distgnn.models.registry`, docs/design.md#models).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from distgnn.errors import DistgnnError

#: the normalisations an aggregate performs (``distgnn.kernels.ops.aggregate``'s ``norm``; a model declares
#: one as its ``norm``, docs/design.md#own-model)
NORMS = ("sum", "mean", "gcn", "sym")
#: norms whose aggregate adds each destination's own row (gcn: h_v / (deg + 1); sym: the I of A + I)
SELF_TERM_NORMS = ("gcn", "sym")
#: GraphSAGE's ``--aggregator`` values (each is also the norm of its aggregate)
AGGREGATORS = ("mean", "gcn")
#: dense-work precisions (distgnn/kernels/precision.py applies them)
PRECISIONS = ("fp32", "bf16")
#: ``--precision`` values: a precision, or ``auto`` (bf16 where every rank's CPU multiplies
#: bfloat16 natively, else fp32; distgnn/cpu_precision.py), resolved when the run starts
PRECISION_CHOICES = (*PRECISIONS, "auto")
#: how training rows travel (``--message-precision``; distgnn/kernels/message_codec.py). ``auto``:
#: the algorithm's default (:func:`distgnn.exchange.spec.default_messages`)
MESSAGE_PRECISIONS = ("auto", "fp32", "bf16", "int8", "int4", "int2")
#: the integer widths' code bits
MESSAGE_BITS = {"int8": 8, "int4": 4, "int2": 2}
#: a user's own module (``distgnn.train_model``) is named ``custom:<class name>``
CUSTOM_PREFIX = "custom:"


def check_precision(precision: str, allowed: tuple[str, ...] = PRECISIONS) -> str:
    """``precision`` when it is one of ``allowed`` (the precisions that run; ``auto`` too before
    it is resolved: :data:`PRECISION_CHOICES`); else one line naming the option."""
    if precision not in allowed:
        raise DistgnnError(f"--precision must be one of {', '.join(allowed)}, got {precision!r}")
    return precision


def message_row_bytes(width: int, messages: str, group: int = 0) -> int:
    """Bytes one row of ``width`` float32 values takes on the wire under ``messages`` (fp32,
    bf16, int8, int4, int2; ``group`` columns per scale, 0: the row): codes, the float32 (scale,
    low) pairs and padding to 4 bytes (native/include/distgnn/quantize.hpp)."""
    bits = MESSAGE_BITS.get(messages)
    if bits is None:
        return width * (2 if messages == "bf16" else 4)
    groups = 1 if group <= 0 or group >= width else -(-width // group)
    raw = 8 * groups + -(-width * bits // 8)
    return -(-raw // 4) * 4


def check_message_precision(messages: str) -> str:
    """``messages`` when it is one of :data:`MESSAGE_PRECISIONS`; else one line naming the option."""
    if messages not in MESSAGE_PRECISIONS:
        raise DistgnnError(f"--message-precision must be one of {', '.join(MESSAGE_PRECISIONS)}, "
                           f"got {messages!r}")
    return messages


#: The one grammar of algorithm names (the workflow's wildcard and the report use it too).
ALGO_PATTERN = r"0c|cd-0|cd-[1-9][0-9]*(?:-orig)?"
_PATTERN = re.compile(r"^(?:(0c)|cd-(0)|cd-([1-9][0-9]*)(-orig)?)$")


@dataclass(frozen=True)
class Algorithm:
    """``0c`` (no aggregate exchange), ``cd-0`` (exact), ``cd-<r>`` and ``cd-<r>-orig``."""

    name: str
    delay: int          #: r; 0 for cd-0 and 0c
    exchange: bool      #: False for 0c
    paper_rule: bool    #: DistGNN's own cd-r rule, as its paper states it (cd-<r>-orig)

    @property
    def cdr_variant(self) -> bool:
        """distgnn's cd-<r> (r >= 1, not the paper's rule): the one whose options
        (``--cdr-rule``, ``--fresh-copies``, delayed gradients) may apply."""
        return self.delay > 0 and not self.paper_rule

    @property
    def exact(self) -> bool:
        return self.exchange and self.delay == 0

    def trains_with_input_cache(self, parts: int) -> bool:
        """Whether training may use layer 0's exact input aggregate computed once: its own layer-0
        aggregate equals it (cd-0, or any algorithm on one rank); 0c and cd-r on P > 1 keep their
        own layer-0 semantics."""
        return self.exact or parts == 1

    def keeps_own_input_aggregate(self, parts: int, aggregates_first: bool) -> bool:
        """Whether training at ``parts`` ranks keeps its own layer-0 aggregate of the constant input
        once it stops changing (0c from the first step, cd-r from step 3r): only when layer 0
        aggregates the input itself, before any map (``aggregates_first``; else its aggregate
        changes with the weights). cd-r-orig's alternates; cd-0 and one rank use the exact cache
        instead (:meth:`trains_with_input_cache`)."""
        return (parts > 1 and aggregates_first
                and (not self.exchange or self.cdr_variant))

    @property
    def global_degree(self) -> bool:
        """cd-0 and cd-r divide by the global degree; 0c by the local one (cd-r-orig: per vertex)."""
        return self.exchange and not self.paper_rule


def steady_start(algorithm: Algorithm, epochs: int) -> int:
    """First epoch (0-based) counted in steady-state figures: 2r for cd-r (its messages and their
    deliveries are in flight from then on); 1 otherwise (the first epoch builds caches); 0 when that
    would leave nothing. The trainer records it in summary.json; the report reads it from there."""
    start = 2 * algorithm.delay if algorithm.delay else 1
    return start if epochs > start else 0


def parse_algorithm(name: str) -> Algorithm:
    """Parse ``0c``, ``cd-0``, ``cd-<r>`` (r >= 1) or ``cd-<r>-orig``; anything else is refused."""
    match = _PATTERN.match(name)
    if not match:
        raise DistgnnError(f"--algo: unknown algorithm '{name}' (expected 0c, cd-0, cd-<r> or "
                           f"cd-<r>-orig with r >= 1)")
    if match.group(1):
        return Algorithm(name, 0, exchange=False, paper_rule=False)
    if match.group(2):
        return Algorithm(name, 0, exchange=True, paper_rule=False)
    return Algorithm(name, int(match.group(3)), exchange=True, paper_rule=bool(match.group(4)))


#: where the dense work runs (``--apply``); see docs/design.md#apply-at-root
APPLY_MODES = ("auto", "root", "replicas")


def resolve_apply(apply: str, algorithm: Algorithm) -> str:
    """``root`` or ``replicas`` for ``--apply`` (``auto``: ``root`` for cd-0 and cd-<r>;
    ``replicas`` for 0c and cd-<r>-orig, DistGNN's schemes); asking ``root`` for those two is
    refused in one line."""
    if apply not in APPLY_MODES:
        raise DistgnnError(f"--apply must be one of {', '.join(APPLY_MODES)}, got {apply!r}")
    runs_at_root = algorithm.exchange and not algorithm.paper_rule
    if apply == "auto":
        return "root" if runs_at_root else "replicas"
    if apply == "root" and not runs_at_root:
        raise DistgnnError(f"--apply root: {algorithm.name} is DistGNN's scheme, which runs the "
                           f"dense work on every replica (use --apply replicas, or auto)")
    return apply

