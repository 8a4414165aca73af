# distgnn pipeline: fetch -> assign -> build (one job per partition) -> train -> report.
# Laptop:   snakemake -c2                      (default config: a small twin, under 10 minutes)
# Cluster:  snakemake --profile cluster/slurm  (train runs as submitit Slurm jobs of P ranks)
# Redo one stage: snakemake -c2 --forcerun <rule>.   Outputs: docs/design.md#pipeline.
import sys
from snakemake.utils import min_version, validate
from distgnn.models.registry import BUILT_IN, DEFAULT_MODEL, run_prefix
from distgnn.vocabulary import ALGO_PATTERN  # the one grammar of names
from distgnn.workflow_config import registry_mismatch_in, unknown_dataset, unknown_key_in, unknown_model

min_version("9.0")   # as pyproject.toml asks (snakemake>=9)


configfile: "config/config.yaml"


# A typo in a key (epoch: for epochs:), a dataset or a model name in one line, before validate() dumps
# schema and config, and before a fetch job would fail with the cause only in its log.
unknown_key = unknown_key_in(config, f"{workflow.basedir}/workflow/schemas/config.schema.yaml") \
    or unknown_dataset(config) or unknown_model(config)
if unknown_key:
    print(f"Error in the config: {unknown_key}", file=sys.stderr)
    sys.exit(1)
validate(config, "workflow/schemas/config.schema.yaml")
# The schema's model and cd-r rule names are the registries' (the one check of that).
mismatch = registry_mismatch_in(f"{workflow.basedir}/workflow/schemas/config.schema.yaml")
if mismatch:
    print(f"Error in the workflow: {mismatch}", file=sys.stderr)
    sys.exit(1)


wildcard_constraints:
    store=r"[^/]+",
    method=r"[a-z]+",
    P=r"[1-9][0-9]*",
    k=r"[0-9]+",
    # run folder: [model-]algorithm[-apply], the model a built-in one or the config's own class
    algo=rf"(?:{'|'.join(sorted({run_prefix(m) for m in (*BUILT_IN, config['train'].get('model', DEFAULT_MODEL))} - {''}))})?(?:{ALGO_PATTERN})(?:-root|-replicas)?",


# train only submits (submitit) and waits: it never becomes a Slurm job itself. report reads the
# runs' small summaries and draws a few plots in seconds: a Slurm job of its own would only queue.
localrules:
    all,
    train,
    report,


include: "workflow/rules/common.smk"


check_apply()


include: "workflow/rules/data.smk"
include: "workflow/rules/partition.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/predict.smk"


rule all:
    default_target: True
    input:
        all_reports(),
        all_predictions(),
