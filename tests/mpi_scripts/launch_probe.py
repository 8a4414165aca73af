"""MPI probe for the launcher tests: every rank reports what it sees; rank 0 writes it as JSON.

argv[1]: output file. DISTGNN_TEST_FAIL_RANK=k makes rank k raise before the collective.
"""
import json
import os
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
if os.environ.get("DISTGNN_TEST_FAIL_RANK") == str(rank):
    raise RuntimeError(f"probe failure on rank {rank}")
record = {"rank": rank, "size": size, "sum": comm.allreduce(rank),
          "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
          "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
          "omp_proc_bind": os.environ.get("OMP_PROC_BIND"),
          "affinity": sorted(os.sched_getaffinity(0))}
records = comm.gather(record)
if rank == 0:
    with open(sys.argv[1] + ".tmp", "w") as fh:
        json.dump(records, fh)
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
