"""Names and paths of the partition stores (see :mod:`distgnn.partition`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

METHODS = ("libra", "hdrf", "random", "hash")
#: methods that stream the edges in an order (random and hash do not depend on it)
STREAMED = ("libra", "hdrf")
#: edge orders: the store's CSR order, or a seeded uniform permutation of the edges
ORDERS = ("store", "shuffle")
#: root rules: any replica, balancing roots (and training roots) per part; or, among the replicas
#: holding the most of the vertex's in-edges, the one that balances best
ROOT_RULES = ("balance", "in-edges")
ASSIGNMENT = "assignment.zarr"
MASKS = ("train_mask", "val_mask", "test_mask")
FORMAT_VERSION = 1
#: local numbering of a part: 2 = its roots first (``[0, n_roots)``), then its leaves, each block in
#: ascending global id; parts without the attribute (version 1) numbered by global id alone
LAYOUT_VERSION = 2
#: HDRF balance weight (lambda in Petroni et al.); 1 is the paper's default.
HDRF_LAMBDA = 1.0


def default_order(method: str) -> str:
    """libra streams in store order (DGL's order for the same graph); hdrf in a seeded shuffle,
    the setting it was designed for (on a destination-grouped stream it replicates about as much
    as libra)."""
    return "shuffle" if method == "hdrf" else "store"


def part_name(k: int) -> str:
    return f"part_{k}.zarr"


def stray_parts(folder: Path, parts: int) -> list[Path]:
    """The ``part_<K>.zarr`` of ``folder`` with K >= ``parts``: left by an earlier partitioning
    into more parts, they belong to no part of the current assignment."""
    numbered = {int(p.stem.removeprefix("part_")): p for p in Path(folder).glob("part_*.zarr")
                if p.stem.removeprefix("part_").isdigit()}
    return [numbered[k] for k in sorted(numbered) if k >= parts]


def default_out(graph: Path, method: str, parts: int) -> Path:
    """``partitions/<store>/<method>-<P>`` where ``<store>`` is the graph store's folder name."""
    graph = Path(graph)
    store = graph.parent.name if graph.name == "graph.zarr" else graph.stem
    return Path("partitions") / store / f"{method}-{parts}"


def part_dtype(parts: int) -> np.dtype:
    """dtype of ``edge_part``: uint8 up to 255 parts, uint16 up to 65535."""
    return np.dtype(np.uint8) if parts <= 255 else np.dtype(np.uint16)


def words(parts: int) -> int:
    """uint64 words of one replica bitset."""
    return (parts + 63) // 64


def on_part(replicas: np.ndarray, k: int) -> np.ndarray:
    """bool [N]: the vertices with a replica on partition ``k``."""
    word = replicas[:, k // 64]
    return ((word >> np.uint64(k % 64)) & np.uint64(1)).astype(bool)


def members(replicas: np.ndarray, k: int) -> np.ndarray:
    """Global ids (int64, ascending) of the vertices with a replica on partition ``k``."""
    return np.flatnonzero(on_part(replicas, k)).astype(np.int64)


def split_mask(replicas: np.ndarray, rows_per_chunk: int = 1 << 22) -> np.ndarray:
    """bool [N]: the vertices with replicas on two or more partitions, from the bitsets [N, W]
    (an array or a zarr array), read in row chunks so temporaries stay a few MB."""
    n = replicas.shape[0]
    out = np.empty(n, dtype=bool)
    one = np.uint64(1)
    for start in range(0, n, rows_per_chunk):
        block = np.asarray(replicas[start:start + rows_per_chunk])
        seen = np.zeros(len(block), dtype=bool)
        split = np.zeros(len(block), dtype=bool)
        for col in range(block.shape[1]):
            word = block[:, col]
            nonzero = word != 0
            # two bits in one word (w & (w - 1) clears the lowest), or bits in two words
            split |= ((word & (word - one)) != 0) | (seen & nonzero)
            seen |= nonzero
        out[start:start + len(block)] = split
    return out


def part_vertex_counts(replicas: np.ndarray, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """(vertices, split vertices), each int64 [parts]: per partition, the vertices with a replica
    on it (a built part's ``n_k``) and those of them with replicas on other partitions too (its
    ``num_split``)."""
    bits = np.asarray(replicas)
    split = split_mask(bits)
    vertices = np.zeros(parts, dtype=np.int64)
    split_vertices = np.zeros(parts, dtype=np.int64)
    for k in range(parts):
        on = on_part(bits, k)
        vertices[k] = np.count_nonzero(on)
        split_vertices[k] = np.count_nonzero(on & split)
    return vertices, split_vertices


def check_layout(path: Path | str, attrs: dict) -> None:
    """Refuse, in one line, a part store written before the current local numbering."""
    from distgnn.errors import DistgnnError

    version = attrs.get("layout_version", 1)
    if version != LAYOUT_VERSION or "n_roots" not in attrs:
        folder = Path(path).parent
        raise DistgnnError(
            f"{path}: part in layout version {version}, this distgnn reads version "
            f"{LAYOUT_VERSION} (roots first); rebuild the parts from the same assignment with "
            f"`distgnn partition build {folder} --part K` for each K (in the workflow: "
            f"`snakemake --forcerun build`)")
