# distgnn pipeline: fetch -> assign -> build (one job per partition) -> train -> report.
# Laptop:   snakemake -c2                      (default config: a small twin, under 10 minutes)
# Cluster:  snakemake --profile cluster/slurm  (train runs as submitit Slurm jobs of P ranks)
# Redo one stage: snakemake -c2 --forcerun <rule>.   Outputs: docs/design.md, section 2.
from snakemake.utils import min_version, validate

min_version("8.0")


configfile: "config/config.yaml"


validate(config, "workflow/schemas/config.schema.yaml")


wildcard_constraints:
    store=r"[^/]+",
    method=r"[a-z]+",
    P=r"[1-9][0-9]*",
    k=r"[0-9]+",
    algo=r"(0c|cd-[0-9]+(-orig)?)(-root|-replicas)?",  # run folder: algorithm[-apply]


# train only submits (submitit) and waits: it never becomes a Slurm job itself.
localrules:
    all,
    train,


include: "workflow/rules/common.smk"


check_apply()


include: "workflow/rules/data.smk"
include: "workflow/rules/partition.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        all_reports(),
