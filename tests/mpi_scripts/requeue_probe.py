"""Requeue probe: without --resume, ranks sleep (a long run waiting to be preempted); with
--resume (added by the launcher's checkpoint() on requeue), rank 0 writes argv[1] and all exit.

argv[1]: output file; argv[2]: file rank 0 touches once it is running (the test then signals).
"""
import json
import os
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
if "--resume" not in sys.argv:
    if comm.Get_rank() == 0:
        open(sys.argv[2], "w").close()
    for _ in range(600):  # Python-level sleep: submitit's signal handler runs between the steps
        time.sleep(0.1)
    sys.exit("never preempted")
comm.Barrier()
if comm.Get_rank() == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump({"argv": sys.argv, "size": comm.Get_size(),
                   "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                   "restarts": os.environ.get("SLURM_RESTART_COUNT")}, fh)
