# train: a local rule that submits `distgnn train` through submitit (`distgnn launch`) and waits.
# Locally: one submitit task running `mpiexec -n P`; with cluster/slurm: one Slurm job of P tasks
# (chosen by the resources launch_executor and submitit_preset, which the profiles set).


rule train:
    input:
        assignment="partitions/{store}/{method}-{P}/assignment.zarr",
        parts=part_stores,
    output:
        metrics="runs/{store}/{method}-{P}/{algo}/metrics.jsonl",
        summary="runs/{store}/{method}-{P}/{algo}/summary.json",
        model="runs/{store}/{method}-{P}/{algo}/model.pt",
    conda:
        "../envs/distgnn.yaml"
    log:
        "logs/train/{store}/{method}-{P}/{algo}.log",
    params:
        partdir=part_dir,
        algo=algo_of_run,
        rundir=lambda wildcards, output: os.path.dirname(output.summary),
        options=lambda wildcards: train_options(algo_of_run(wildcards)),
        submitit="logs/submitit/{store}/{method}-{P}/{algo}",
    # Locally a timed run has the machine to itself: it asks for more cores than any machine has,
    # and Snakemake gives it every core (--cores), so no two trains, nor a train and another job,
    # overlap and share cores (docs/design.md#timed-runs). The Slurm profiles set 1 (train only
    # submits and waits there).
    threads: ALL_CORES
    resources:
        launch_executor="local",
        submitit_preset="local",
    shell:
        "distgnn launch {params.partdir} --algo {params.algo}"
        " --executor {resources.launch_executor} --preset {resources.submitit_preset}"
        " --log-dir {params.submitit} --out {params.rundir} {params.options} > {log} 2>&1"
