"""A scaling model of distributed full-batch training: epoch time and speedup for P = 1 ... 128.

* :mod:`.costs`: compute costs measured on one rank (aggregation per edge and width, dense work per
  vertex and width);
* :mod:`.replication`: replication factor against P, a law fitted on P <= 16 and extrapolated;
* :mod:`.network`: latency/bandwidth model of Alltoallv and Allreduce (100 Gb/s InfiniBand
  defaults, or fitted to an MPI microbenchmark, :mod:`.microbench`);
* :mod:`.model`: the epoch-time prediction per algorithm.
"""
