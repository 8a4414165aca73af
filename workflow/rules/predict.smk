# predict: every vertex's logits (and embeddings) from a trained run, as P MPI ranks with the exact
# aggregation (`distgnn predict`). Made for every run when predict.enabled, or on request:
#   snakemake -c2 runs/<store>/<method>-<P>/<algo>/predictions.zarr
# The ranks start with resources.mpi: `mpiexec --oversubscribe` here, `srun` in cluster/slurm.


rule predict:
    input:
        summary="runs/{store}/{method}-{P}/{algo}/summary.json",
        model="runs/{store}/{method}-{P}/{algo}/model.pt",
        parts=part_stores,
    output:
        directory("runs/{store}/{method}-{P}/{algo}/predictions.zarr"),
    conda:
        "../envs/distgnn.yaml"
    log:
        "logs/predict/{store}/{method}-{P}/{algo}.log",
    params:
        rundir=lambda wildcards, input: os.path.dirname(input.summary),
        options=predict_options(),
    threads: lambda wildcards: int(wildcards.P)
    resources:
        tasks=lambda wildcards: int(wildcards.P),
        mpi="mpiexec --oversubscribe",
        runtime=30,
    shell:
        "{resources.mpi} -n {resources.tasks} distgnn predict {params.rundir} --threads 1 --quiet"
        " {params.options} > {log} 2>&1"
