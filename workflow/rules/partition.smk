# assign (edge -> partition, roots) then build one part_<k>.zarr per partition, in parallel (docs/design.md#partitioning).


rule assign:
    input:
        "data/{store}/graph.zarr",
    output:
        directory("partitions/{store}/{method}-{P}/assignment.zarr"),
    conda:
        "../envs/distgnn.yaml"
    log:
        "logs/assign/{store}/{method}-{P}.log",
    params:
        out=part_dir,
        seed=config["partition"].get("seed", 0),
        roots=config["partition"].get("roots", "balance"),
    resources:
        runtime=60,
    shell:
        "distgnn partition assign {input} --parts {wildcards.P} --method {wildcards.method}"
        " --seed {params.seed} --roots {params.roots} --out {params.out} > {log} 2>&1"


rule build:
    input:
        "partitions/{store}/{method}-{P}/assignment.zarr",
    output:
        directory("partitions/{store}/{method}-{P}/part_{k}.zarr"),
    conda:
        "../envs/distgnn.yaml"
    log:
        "logs/build/{store}/{method}-{P}/part_{k}.log",
    params:
        partdir=part_dir,
        # the part layout this distgnn writes: a part built by an older one is rebuilt (params trigger)
        layout=LAYOUT_VERSION,
        order=config["partition"].get("order", DEFAULT_VERTEX_ORDER),
    threads: 1
    resources:
        runtime=60,
    shell:
        "distgnn partition build {params.partdir} --part {wildcards.k} --order {params.order}"
        " --threads {threads}"
        " > {log} 2>&1"
