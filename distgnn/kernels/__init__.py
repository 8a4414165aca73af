"""The shared-memory kernels' floor (docs/design.md#architecture): the native aggregation and its
autograd (:mod:`~distgnn.kernels.ops`), source tiling (:mod:`~distgnn.kernels.tiling`), the
output buffer pool (:mod:`~distgnn.kernels.output_pool`), GAT's local attention
(:mod:`~distgnn.kernels.attention`) and the dense-work precision (:mod:`~distgnn.kernels.precision`).
Nothing here knows of ranks, parts or MPI."""
