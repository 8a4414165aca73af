"""Run under ``mpiexec -n 3``: drive ReplicaAggregation (``--apply replicas``) or
RootAggregation (``--apply root``) on a hand-built three-part graph and print (rank 0) the
aggregates at every step, as JSON: every split vertex's on each of its replicas (replicas), or
every root's (root).

Global graph (u -> v), split vertices 0 (root part 0, leaves on 1 and 2), 5 (root part 1, leaf on
2) and 4 (root part 2, leaf on 0):
    part 0: 1->0, 6->0, 1->4, 4->1   part 1: 2->0, 2->5, 7->5   part 2: 3->0, 3->5, 3->4, 0->3
The edges 4->1 and 0->3 have a leaf as their source, so under root the leaves' copies of their
roots' rows are read. Local ids: each part's roots first, then its leaves (layout version 2).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # bench/, for its retired rules

import numpy as np
import torch

from distgnn.comm import Communicator
from distgnn.exchange import ReplicaAggregation, RootAggregation
from distgnn.exchange.rules import CdrRule, Recompute
from distgnn.exchange.spec import ExchangeSpec
from distgnn.exchange.recompute import RECOMPUTED_LAYER
from distgnn.partition.part_loader import PartitionData
from distgnn.row_exchange import RowPlan
from distgnn.timers import Timers
from distgnn.vocabulary import parse_algorithm

#: part 0 sums a leaf copy (4) and a root row (6) into vertex 1 (--cdr-rule present counts both)
EDGES = {0: [(1, 0), (6, 0), (1, 4), (4, 1), (6, 1)], 1: [(2, 0), (2, 5), (7, 5)],
         2: [(3, 0), (3, 5), (3, 4), (0, 3)]}
VERTICES = {0: [0, 1, 6, 4], 1: [2, 5, 7, 0], 2: [3, 4, 0, 5]}   #: roots first, then leaves
ROOT = {0: 0, 5: 1, 4: 2}
GLOBAL_IN_DEGREE = {0: 4, 5: 3, 4: 2}
NUM_GLOBAL, WIDTH = 8, 2
HEADS = 2   #: attention runs (``@root-gat``): z [n, HEADS, WIDTH], el and er [n, HEADS]
#: the input form's runs (``@root-gat-inputs``): z = (h W^T).view(n, HEADS, WIDTH) with h
#: [n, IN], IN <= WIDTH, so cd-r weights h and maps the merge by W
IN = 2


def csr(n, pairs):
    indptr = np.zeros(n + 1, dtype=np.int64)
    for _, v in pairs:
        indptr[v + 1] += 1
    np.cumsum(indptr, out=indptr)
    cursor, indices = indptr[:-1].copy(), np.zeros(len(pairs), dtype=np.int32)
    for u, v in sorted(pairs, key=lambda e: (e[1], e[0])):
        indices[cursor[v]] = u
        cursor[v] += 1
    return torch.from_numpy(indptr), torch.from_numpy(indices)


def build(k: int, parts: int) -> PartitionData:
    g2l = {g: i for i, g in enumerate(VERTICES[k])}
    local = [(g2l[u], g2l[v]) for u, v in EDGES[k]]
    n = len(VERTICES[k])
    indptr, indices = csr(n, local)
    t_indptr, t_indices = csr(n, [(v, u) for u, v in local])
    leaf_groups = [[] for _ in range(parts)]
    root_groups = [[] for _ in range(parts)]
    for g in VERTICES[k]:
        holders = [p for p in range(parts) if g in VERTICES[p]]
        if len(holders) < 2:
            continue
        if ROOT[g] == k:
            for p in holders:
                if p != k:
                    root_groups[p].append(g)
        else:
            leaf_groups[ROOT[g]].append(g)

    def plan(groups):
        ids = [g2l[g] for group in groups for g in sorted(group)]
        offsets = np.cumsum([0] + [len(group) for group in groups]).astype(np.int64)
        return RowPlan(torch.tensor(ids, dtype=torch.int64), offsets)

    degree = torch.tensor([GLOBAL_IN_DEGREE.get(g, 0) or sum(1 for p in EDGES.values() for e in p if e[1] == g)
                           for g in VERTICES[k]], dtype=torch.int64)
    empty = torch.zeros(n, dtype=torch.bool)
    is_root = [ROOT.get(g, k) == k for g in VERTICES[k]]
    return PartitionData(
        k=k, num_parts=parts, attrs={"n_roots": sum(is_root)}, local_to_global=torch.tensor(VERTICES[k]),
        indptr=indptr, indices=indices, t_indptr=t_indptr, t_indices=t_indices,
        in_degree_global=degree, is_root=torch.tensor(is_root),
        feat=torch.zeros(n, WIDTH), label=torch.zeros(n, dtype=torch.int64),
        masks={"train_mask": empty, "val_mask": empty, "test_mask": empty},
        leaf_send=plan(leaf_groups), root_recv=plan(root_groups))


def features(step: int) -> torch.Tensor:
    """h at this step, by global id (the same on every rank)."""
    return torch.from_numpy(np.random.default_rng(step).standard_normal((NUM_GLOBAL, WIDTH)))


def attention_inputs(step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """z [NUM_GLOBAL, HEADS, WIDTH], el and er [NUM_GLOBAL, HEADS] at this step, by global id."""
    rng = np.random.default_rng(1000 + step)
    z = rng.standard_normal((NUM_GLOBAL, HEADS, WIDTH))
    el, er = rng.standard_normal((2, NUM_GLOBAL, HEADS))
    return torch.from_numpy(z), torch.from_numpy(el), torch.from_numpy(er)


def layer_inputs(step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """h [NUM_GLOBAL, IN], W [HEADS * WIDTH, IN], el and er [NUM_GLOBAL, HEADS] at this step."""
    rng = np.random.default_rng(2000 + step)
    h, w = rng.standard_normal((NUM_GLOBAL, IN)), rng.standard_normal((HEADS * WIDTH, IN))
    el, er = rng.standard_normal((2, NUM_GLOBAL, HEADS))
    return tuple(torch.from_numpy(t) for t in (h, w, el, er))


def attend_inputs(agg: RootAggregation, h: torch.Tensor, w: torch.Tensor, el: torch.Tensor,
                  er: torch.Tensor) -> torch.Tensor:
    """The attention of a layer z = h W^T that hands its (h, W) (the input form under cd-r)."""
    return agg.attention(0, (h @ w.T).view(-1, HEADS, WIDTH), el, er, inputs=(h, w))


#: the stride-1 steps of a growing rule (``-grow``): every bin moves at steps < 2, one after
GROW_STEPS = 2


def timed(rule: type[CdrRule], timing: frozenset[str]) -> type[CdrRule]:
    """``rule`` with the timing ``timing`` names: ``prompt`` (each message taken at the next
    step), ``grow`` (prompt, stride 1 at steps < GROW_STEPS, then r), ``hold`` (held delayed
    gradients); a user's rule, through the hooks of docs/design.md#rule-hooks."""
    if not timing:
        return rule
    attrs = {"prompt": bool(timing & {"prompt", "grow"}), "hold_gradients": "hold" in timing}
    if "grow" in timing:
        attrs["stride"] = lambda self, step, delay: 1 if step < GROW_STEPS else delay
    return type(f"Timed{rule.__name__}", (rule,), attrs)


def spec(delay: int, fresh: bool = False, warm: bool = False, present: bool = False,
         recompute: bool = False, budget: float | None = None,
         delayed_gradients: bool = False, timing: frozenset[str] = frozenset()) -> ExchangeSpec:
    """cd-<delay> at the root under the rule these flags name (warm and present: the retired
    rules of bench/retired_rules.py; recompute with ``budget`` None: every source leaf), timed
    as ``timing`` says (:func:`timed`)."""
    from bench.retired_rules import Present, Warm, WarmRecompute

    rule = {(True, True): WarmRecompute, (True, False): Warm, (False, True): Recompute}.get(
        (warm, recompute), Present if present else CdrRule)
    rule = timed(rule, timing)
    return ExchangeSpec(parse_algorithm(f"cd-{delay}" if delay else "cd-0"), "root",
                        delayed_gradients, fresh, rule, True,
                        (float("inf") if budget is None else budget) if recompute else None)


def gradients(comm: Communicator, part: PartitionData, delay: int, steps: int, fresh: bool,
              attention: str, warm: bool = False, recompute: bool = False,
              timing: frozenset[str] = frozenset()) -> list | None:
    """Under apply-at-root with delayed gradients, the same inputs at every step (step 0's) and the
    loss sum(out * weight), weight fixed by global id: per step, every root's input gradient (z, el,
    er for attention; h, el, er and, under the key "W", the rank's W gradient for its input form;
    h for the mean). ``recompute`` (--cdr-rule recompute, the mean on layer 1): the gradient of
    every row the rank computes on, its recomputed leaves' included, under the key "rows"."""
    agg = RootAggregation(part, "mean", comm, comm.dup(), Timers(), 1,
                          exchange=spec(delay, fresh, warm, recompute=recompute,
                                        delayed_gradients=True, timing=timing),
                          recompute=recompute)
    if recompute:
        gids, out = part.local_to_global[agg.training_rows()], []
        for _ in range(steps):
            h = features(0)[gids].float().requires_grad_()
            a = agg(RECOMPUTED_LAYER, h)
            weight = torch.from_numpy(np.random.default_rng(7).standard_normal((NUM_GLOBAL, WIDTH)))
            (a * weight[gids[:part.num_roots]].float()).sum().backward()
            out.append({"rows": [[int(g), h.grad[i].tolist()] for i, g in enumerate(gids)]})
        agg.finish()
        return comm.gather(out)
    ids, out = part.local_to_global[:part.num_roots], []
    for _ in range(steps):
        w = None
        if attention == "inputs":
            h, w, el, er = layer_inputs(0)
            inputs = [t[ids].float().requires_grad_() for t in (h, el, er)]
            w = w.float().requires_grad_()
            a = attend_inputs(agg, inputs[0], w, *inputs[1:])
        elif attention:
            inputs = [t[ids].float().requires_grad_() for t in attention_inputs(0)]
            a = agg.attention(0, *inputs)
        else:
            inputs = [features(0)[ids].float().requires_grad_()]
            a = agg(0, inputs[0])
        weight = torch.from_numpy(np.random.default_rng(7).standard_normal((NUM_GLOBAL, a[0].numel())))
        (a.flatten(1) * weight[ids].float()).sum().backward()
        out.append({int(g): torch.cat([t.grad[i].flatten() for t in inputs]).tolist()
                    for i, g in enumerate(ids)})
        if w is not None:
            out[-1]["W"] = w.grad.flatten().tolist()
    agg.finish()
    return comm.gather(out)


def run(comm: Communicator, algo: str, steps: int, apply: str) -> list | None:
    part = build(comm.rank, comm.size)
    algorithm = parse_algorithm(algo)
    timing = set()   # -prompt, -grow, -hold, last (any of them, in this order)
    for word in ("hold", "grow", "prompt"):
        if apply.endswith(f"-{word}"):
            timing.add(word)
            apply = apply.removesuffix(f"-{word}")
    timing = frozenset(timing)
    warm = apply.endswith("-warm")     # --cdr-rule warm
    apply = apply.removesuffix("-warm")
    present = apply.endswith("-present")   # --cdr-rule present
    apply = apply.removesuffix("-present")
    budget = None   # --recompute-budget B, spelled -bB after -recompute
    if "-recompute-b" in apply:
        apply, _, b = apply.rpartition("-b")
        budget = float(b)
    recompute = apply.endswith("-recompute")   # --cdr-rule recompute (layer 1)
    apply = apply.removesuffix("-recompute")
    fresh = apply.endswith("-fresh")   # --fresh-copies
    apply = apply.removesuffix("-fresh")
    gradient_kinds = {"root-grad": "", "root-gat-grad": "z", "root-gat-inputs-grad": "inputs"}
    if apply in gradient_kinds:  # frozen inputs: each root's input gradients
        return gradients(comm, part, algorithm.delay, steps, fresh, gradient_kinds[apply], warm,
                         recompute, timing)
    if apply in ("root-gat", "root-gat-inputs"):  # GAT's attention at the roots
        agg = RootAggregation(part, "mean", comm, comm.dup(), Timers(), 1,
                              exchange=spec(algorithm.delay, fresh))
        ids, out = part.local_to_global[:part.num_roots], []
        for step in range(steps):
            if apply == "root-gat-inputs":
                h, w, el, er = layer_inputs(step)
                a = attend_inputs(agg, h[ids].float(), w.float(), el[ids].float(), er[ids].float())
            else:
                z, el, er = (t[ids].float() for t in attention_inputs(step))
                a = agg.attention(0, z, el, er)
            out.append({int(g): a[i].flatten().tolist() for i, g in enumerate(ids)})
        agg.finish()
        return comm.gather(out)
    if apply == "root":
        agg = RootAggregation(part, "mean", comm, comm.dup(), Timers(), 1,
                              exchange=spec(algorithm.delay, fresh, warm, present, recompute,
                                            budget, timing=timing),
                              recompute=recompute)
        rows = part.num_roots
        if recompute:  # layer 1: each leaf source's row computed on its own rank, at this step
            recomputed = part.local_to_global[agg.training_rows()]
            out = []
            for step in range(steps):
                a = agg(RECOMPUTED_LAYER, features(step)[recomputed].float())
                out.append({int(g): a[i].tolist() for i, g in enumerate(VERTICES[comm.rank][:rows])})
            agg.finish()
            return comm.gather(out)
    else:
        agg = ReplicaAggregation(part, algorithm, "mean", comm, comm.dup(), Timers(), 1)
        rows = part.num_local
    out = []
    for step in range(steps):
        h = features(step)[part.local_to_global[:rows]].float()
        a = agg(0, h)
        out.append({int(g): a[i].tolist() for i, g in enumerate(VERTICES[comm.rank][:rows])
                    if apply == "root" or g in ROOT})
    agg.finish()
    return comm.gather(out)


def main() -> None:
    """argv: ALGO[@APPLY]:STEPS ... (APPLY: replicas, the default, root, root-gat: GAT's
    attention at the roots, or root-gat-inputs: the same for a layer that hands its (h, W); each
    with -fresh: --fresh-copies, or -recompute: --cdr-rule recompute, driving layer 1 (root and
    root-grad only; root also -recompute-bB: --recompute-budget B); then -warm: --cdr-rule warm
    (root and root-grad only), or -present: --cdr-rule present (root only); then any of
    -prompt, -grow, -hold (the timings of :func:`timed`, root and root-grad); root-grad,
    root-gat-grad, root-gat-inputs-grad: their input gradients); prints
    {spec before ':': values[rank][step][vertex]} on rank 0."""
    comm = Communicator()
    results = {}
    for spec in sys.argv[1:]:
        name, steps = spec.split(":")
        algo, _, apply = name.partition("@")
        results[name] = run(comm, algo, int(steps), apply or "replicas")
    if comm.rank == 0:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
