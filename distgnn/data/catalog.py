"""The dataset names ``distgnn fetch`` knows and its default streaming budget: plain constants, so
the command line lists them without importing numpy or zarr (docs/design.md#datasets)."""
from __future__ import annotations

OGB_DATASETS = ("ogbn-products", "ogbn-papers100M", "ogbn-proteins")
PLANETOID_DATASETS = ("cora", "citeseer", "pubmed")
#: synthetic twins; distgnn/data/synthetic.py holds their sizes (a test keeps the two in step)
TWIN_NAMES = ("synth-reddit", "synth-products", "synth-proteins", "synth-papers100M")
DATASETS = (*OGB_DATASETS, "reddit", *PLANETOID_DATASETS, "npy", *TWIN_NAMES)

#: memory budget of one streamed block of a conversion, bytes
DEFAULT_CHUNK_BUDGET = 64 << 20
#: bytes of CSR indices a conversion builds at once; more are built in row ranges
DEFAULT_CSR_BUDGET = 1 << 30

#: the on-disk forms of a graph store's ``feat`` (docs/design.md#stores): float32, or float16 for
#: half the disk
FEATURE_DTYPES = ("float32", "float16")
