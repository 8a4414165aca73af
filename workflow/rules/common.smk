# Helpers shared by all stages: store names, target lists, command-line options.
from distgnn.data.graph_store import store_name
from distgnn.report.write_report import REPORT_FILES  # the files every report writes
from distgnn.partition.layout import LAYOUT_VERSION
from distgnn.partition.vertex_order import DEFAULT_VERTEX_ORDER
from distgnn.errors import DistgnnError
from distgnn.models.registry import spec as model_spec
from distgnn.models.registry import DEFAULT_MODEL, run_name, run_prefix
from distgnn.vocabulary import MESSAGE_BITS, parse_algorithm, resolve_apply
from snakemake.exceptions import WorkflowError


#: threads a rule asks for to get every core Snakemake has (it caps a rule's threads at --cores)
ALL_CORES = 1 << 20


def datasets_by_store():
    """Store name (docs/design.md#pipeline: dataset[-x<scale>][-d<D>][-l<F>][-rownorm][-f16]
    [-seed<N>], or `name`) -> its dataset entry."""
    return {
        store_name(d["dataset"], d.get("scale", 1.0), d.get("seed", 0), d.get("name"),
                   d.get("mean_degree"), d.get("labelled_fraction"),
                   d.get("normalize_features", False), d.get("feature_dtype", "float32"),
                   d.get("source")): d
        for d in config["datasets"]
    }


def dataset_of(wildcards):
    return datasets_by_store()[wildcards.store]


def fetch_options(wildcards):
    """`distgnn fetch` options of a store's dataset entry."""
    d = dataset_of(wildcards)
    opts = f"--scale {d.get('scale', 1.0)} --seed {d.get('seed', 0)}"
    if d.get("mean_degree") is not None:
        opts += f" --mean-degree {d['mean_degree']}"
    if d.get("labelled_fraction") is not None:
        opts += f" --labelled-fraction {d['labelled_fraction']}"
    if d.get("source"):
        opts += f" --source {d['source']}"
    if d.get("undirected", False):
        opts += " --undirected"
    if d.get("normalize_features", False):
        opts += " --normalize-features"
    if d.get("feature_dtype", "float32") != "float32":
        opts += f" --feature-dtype {d['feature_dtype']}"
    return opts


def part_dir(wildcards):
    return f"partitions/{wildcards.store}/{wildcards.method}-{wildcards.P}"


def part_stores(wildcards):
    """Every part_<k>.zarr of one partition folder (one build job each)."""
    return [f"{part_dir(wildcards)}/part_{k}.zarr" for k in range(int(wildcards.P))]


def train_options(algo):
    """`distgnn train` options of one algorithm from config['train'] (the experiment's model and
    schedule): `apply` as configured (refused at load time where the algorithm cannot run it),
    `delayed_gradients` and `fresh_copies` (when set), `cdr_rule` and
    `recompute_budget` (when set) for cd-<r> only, the one algorithm they apply to;
    `message_precision` (one width, or one per algorithm) and `message_group` for the algorithms
    that send training rows."""
    t = config["train"]
    flags = ["model", "epochs", "layers", "hidden", "lr", "dropout", "weight_decay", "seed",
             "eval_every", "checkpoint_every", "precision"]
    # the model's own options (GraphSAGE's aggregator, GAT's heads; distgnn/models/registry.py)
    flags += [option.name for option in model_spec(t.get("model", DEFAULT_MODEL)).options]
    options = [f"--{f.replace('_', '-')} {t[f]}" for f in flags if f in t]
    if "hang_timeout_s" in t:
        options.append(f"--hang-timeout {t['hang_timeout_s']}")
    if not t.get("input_cache", True):
        options.append("--no-input-cache")
    if not t.get("huge_pages", True):
        options.append("--no-huge-pages")
    if t.get("apply", "auto") != "auto":
        options.append(f"--apply {t['apply']}")
    algorithm = parse_algorithm(algo)
    messages = t.get("message_precision", "auto")
    if isinstance(messages, dict):
        messages = messages.get(algo, "auto")
    if messages != "auto" and algorithm.exchange:  # 0c sends no training rows
        options.append(f"--message-precision {messages}")
    if t.get("message_group") and algorithm.exchange and messages in MESSAGE_BITS:
        options.append(f"--message-group {t['message_group']}")
    if t.get("delayed_gradients") is not None and algorithm.cdr_variant:
        options.append("--delayed-gradients" if t["delayed_gradients"] else "--no-delayed-gradients")
    if t.get("fresh_copies") is not None and algorithm.cdr_variant:
        options.append("--fresh-copies" if t["fresh_copies"] else "--no-fresh-copies")
    if t.get("cdr_rule") and algorithm.cdr_variant:
        options.append(f"--cdr-rule {t['cdr_rule']}")
    if t.get("recompute_budget") is not None and algorithm.cdr_variant:
        options.append(f"--recompute-budget {t['recompute_budget']}")
    return " ".join(options)


def check_apply():
    """Refuse, in one line at load time, a train.apply that one of train.algos cannot run."""
    for algo in config["train"]["algos"]:
        try:
            resolve_apply(config["train"].get("apply", "auto"), parse_algorithm(algo))
        except DistgnnError as exc:
            raise WorkflowError(f"config train.apply / train.algos: {exc}") from None


def run_files(store, method, P, algo):
    """A run's outputs; its folder is the algorithm plus -<apply> when train.apply is not auto,
    after <model>- when train.model is not sage."""
    run = run_name(algo, config["train"].get("apply", "auto"), config["train"].get("model", DEFAULT_MODEL))
    return [f"runs/{store}/{method}-{P}/{run}/{name}"
            for name in ("metrics.jsonl", "summary.json", "model.pt")]


def algo_of_run(wildcards):
    """The algorithm of a run folder name (its <model>- prefix and -root / -replicas suffix removed)."""
    name = wildcards.algo
    prefix = run_prefix(config["train"].get("model", DEFAULT_MODEL))
    if prefix and name.startswith(prefix):
        name = name[len(prefix):]
    for suffix in ("-root", "-replicas"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def store_runs(wildcards):
    """Every run of one store: methods x partition counts x algorithms."""
    return [f for method in config["partition"]["methods"] for P in config["partition"]["parts"]
            for algo in config["train"]["algos"]
            for f in run_files(wildcards.store, method, P, algo)]


def all_reports():
    return [f"reports/{store}/{name}" for store in datasets_by_store() for name in REPORT_FILES]


def all_predictions():
    """RUNDIR/predictions.zarr of every run when predict.enabled, else nothing."""
    if not config.get("predict", {}).get("enabled", False):
        return []
    apply, model = config["train"].get("apply", "auto"), config["train"].get("model", DEFAULT_MODEL)
    return [f"runs/{store}/{method}-{P}/{run_name(algo, apply, model)}/predictions.zarr"
            for store in datasets_by_store() for method in config["partition"]["methods"]
            for P in config["partition"]["parts"] for algo in config["train"]["algos"]]


def predict_options():
    layer = config.get("predict", {}).get("layer")
    return "" if layer is None else f"--layer {layer}"
