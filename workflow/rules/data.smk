# fetch: download, read or generate a dataset into the canonical graph store (docs/design.md#datasets).


rule fetch:
    output:
        directory("data/{store}/graph.zarr"),
    conda:
        "../envs/distgnn.yaml"
    log:
        "logs/fetch/{store}.log",
    params:
        dataset=lambda wildcards: dataset_of(wildcards)["dataset"],
        options=fetch_options,
    threads: 2
    resources:
        runtime=60,
    shell:
        "distgnn fetch {params.dataset} --root data --name {wildcards.store} {params.options}"
        " --threads {threads} --force > {log} 2>&1"
