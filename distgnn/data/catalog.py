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
