"""memory_estimate: the components add up, grow with what they must, and refuse bad folders."""
from __future__ import annotations

import pytest

from distgnn.errors import DistgnnError
from distgnn.train.memory_estimate import (PartShape, estimate_rank_memory, estimate_shape, fits,
                                           layer_widths, num_parameters)


def shape(n=10_000, m=1_000_000, parts=2, leaves=2_000, split=4_000) -> PartShape:
    return PartShape(n=n, m=m, feat_dim=602, num_classes=41, multilabel=False, num_parts=parts,
                     num_leaves=leaves, num_split=split, num_roots=n - leaves)


def test_widths_and_parameters_match_the_model():

    from distgnn.models import GraphSAGE

    assert layer_widths(602, 256, 41, 3) == [(602, 256, 256), (256, 256, 256), (256, 41, 41)]
    model = GraphSAGE(602, 256, 41, 3, "mean")
    assert num_parameters(602, 256, 41, 3) == sum(p.numel() for p in model.parameters())


def test_components_scale_with_the_part():
    small = estimate_shape(shape(), 3, 256, "cd-0")
    big = estimate_shape(shape(n=20_000, m=2_000_000, leaves=4_000, split=8_000), 3, 256, "cd-0")
    assert big.features == pytest.approx(2 * small.features, rel=1e-3)
    assert big.activations == pytest.approx(2 * small.activations, rel=1e-3)
    assert big.total > small.total > small.baseline
    # features are n x F float32 plus labels and masks
    assert small.features >= 10_000 * 602 * 4
    # cd-r keeps R per layer and payloads in flight: more than cd-0, which is more than 0c
    zero_c = estimate_shape(shape(), 3, 256, "0c")
    cd5 = estimate_shape(shape(), 3, 256, "cd-5")
    assert zero_c.exchange == 0 < small.exchange < cd5.exchange
    # one part: no exchange buffers whatever the algorithm
    assert estimate_shape(shape(parts=1), 3, 256, "cd-5").exchange == 0
    d = small.as_dict()
    assert d["total"] == small.total


def test_fits():
    e = [estimate_shape(shape(), 2, 64, "cd-0")] * 2
    ok, reason = fits(e, 10 * 2**30)
    assert ok and "2 rank(s)" in reason
    ok, _ = fits(e, e[0].total)
    assert not ok


def test_reads_partition_attrs(tmp_path):
    import zarr

    with pytest.raises(DistgnnError, match="part_0.zarr"):
        estimate_rank_memory(tmp_path, 0, 2, 64, "cd-0")
    g = zarr.open_group(str(tmp_path / "part_0.zarr"), mode="w")
    g.attrs.update({"n_k": 100, "m_k": 1000, "feat_dim": 8, "num_classes": 3, "P": 1})
    assert estimate_rank_memory(tmp_path, 0, 2, 64, "cd-0") > 0
    bad = zarr.open_group(str(tmp_path / "bad" / "part_0.zarr"), mode="w")
    bad.attrs.update({"n_k": 100})
    with pytest.raises(DistgnnError, match="m_k"):
        estimate_rank_memory(tmp_path / "bad", 0, 2, 64, "cd-0")


def test_apply_at_root_keeps_dense_rows_for_roots_only():
    """Under root the input cache, the saved activations and the working set count the roots'
    rows (n - leaves): activations shrink by exactly the roots' share; the features still count
    all n; GAT keeps its n-row working set; the graph adds the compact tables' arrays; one part:
    no difference."""
    replicas = estimate_shape(shape(), 3, 256, "cd-0", apply="replicas")
    root = estimate_shape(shape(), 3, 256, "cd-0", apply="root")
    leaves, f32 = 2_000, 4
    assert replicas.features - root.features == leaves * 602 * f32   # the input cache's leaf rows
    assert root.activations == pytest.approx(replicas.activations * (10_000 - leaves) / 10_000, rel=1e-9)
    gat = [estimate_shape(shape(), 2, 8, "cd-0", apply=a, model="gat", heads=8) for a in ("root", "replicas")]
    assert gat[1].activations * (10_000 - leaves) / 10_000 < gat[0].activations < gat[1].activations
    assert root.optimizer == replicas.optimizer
    # the compact tables' CSR, transpose and position maps (docs/design.md#compact-rows)
    n, m = 10_000, shape().m
    assert root.graph - replicas.graph == 2 * (n + 1) * 8 + 2 * m * 4 + 4 * n * 8
    assert estimate_shape(shape(), 3, 256, "cd-0").total == root.total      # auto is root for cd-0
    assert estimate_shape(shape(), 3, 256, "0c").total == estimate_shape(shape(), 3, 256, "0c", apply="replicas").total
    one = shape(parts=1, leaves=0, split=0)
    assert estimate_shape(one, 3, 256, "cd-0", apply="root").total == \
        estimate_shape(one, 3, 256, "cd-0", apply="replicas").total


@pytest.mark.parametrize("name", ["sage", "gcn", "gin"])
def test_widths_and_parameters_follow_the_model(name: str) -> None:
    """Each model's parameter count equals its module's; GIN aggregates at its input width (its
    MLP is not linear) and keeps more activations than GCN at the same widths."""
    from distgnn.models import build_model

    model = build_model(name, 602, 256, 41, 3)
    assert num_parameters(602, 256, 41, 3, name) == sum(p.numel() for p in model.parameters())
    aggregated = [a for _, _, a in layer_widths(602, 256, 41, 3, name)]
    assert aggregated == ([602, 256, 256] if name == "gin" else [256, 256, 41])
    if name == "gin":
        assert (estimate_shape(shape(), 3, 256, "cd-0", model="gin").activations
                > estimate_shape(shape(), 3, 256, "cd-0", model="gcn").activations)


def test_gat_widths_and_parameters_follow_its_heads() -> None:
    from distgnn.models import build_model

    model = build_model("gat", 602, 8, 41, 2, heads=8)
    assert num_parameters(602, 8, 41, 2, "gat", heads=8) == sum(p.numel() for p in model.parameters())
    assert layer_widths(602, 8, 41, 2, "gat", heads=8) == [(602, 64, 72), (64, 41, 42)]


def test_recompute_counts_the_recomputed_leaf_rows():
    """--cdr-rule recompute (docs/design.md#cdr-rules): the leaves that recompute add their
    features, input aggregate and layer-0 output; the budget bounds them at budget x roots, and
    all leaves is the most (an unbounded budget)."""
    f32, leaves = 4, 2_000
    base = estimate_shape(shape(), 3, 256, "cd-5")
    half = estimate_shape(shape(), 3, 256, "cd-5", recompute=0.125)  # 0.125 x 8,000 roots
    every = estimate_shape(shape(), 3, 256, "cd-5", recompute=float("inf"))
    assert half.features - base.features == 1_000 * 2 * 602 * f32
    assert every.features - base.features == leaves * 2 * 602 * f32
    assert base.total < half.total < every.total
    assert estimate_shape(shape(), 3, 256, "cd-5", recompute=10.0).total == every.total
