"""Full-batch distributed training: one MPI rank per partition (docs/design.md#training)."""
