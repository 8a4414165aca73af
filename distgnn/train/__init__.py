"""Full-batch distributed training: one MPI rank per partition (see DESIGN section 6)."""
