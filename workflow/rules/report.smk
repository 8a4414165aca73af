# report: tables and plots of every run of one store (provenance read from each summary.json).


rule report:
    input:
        store_runs,
    output:
        [f"reports/{{store}}/{name}" for name in REPORT_FILES],
    conda:
        "../envs/distgnn.yaml"
    log:
        "logs/report/{store}.log",
    resources:
        runtime=30,
    shell:
        "distgnn report --runs runs/{wildcards.store} --out reports/{wildcards.store} > {log} 2>&1"
