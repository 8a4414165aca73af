"""Partitioning side by side with DGL 1.1.3's Libra, on one machine, same threads, same edge order.

    python -m bench.partition [--threads 2] [--parts 2,4,8,16] [--repeats 3] [--work DIR]
    python -m bench.partition --products GRAPH.zarr      (one run: synth-products into 16 parts)

Sections (each figure printed in a table):

1. Replication factor and assignment time on R24 (``bench.graphs``), P = 2, 4, 8, 16: our
   ``libra`` (store order = the order of DGL's ``G.edges()`` for a graph built from the same
   (src, dst) lists) against 3 runs of DGL's kernel ``dgl._sparse_ops.libra_vertex_cut``
   (= ``_CAPI_DGLLibraVertexCut``; it breaks ties at random: mean of 3). DGL's kernel also writes
   one text file per partition after its loop; the loop alone is timed by the parent from the
   child's "START" line (printed just before the call) to the moment the first output file
   (``community0.txt``) appears (polled every 5 ms).
2. ``hdrf`` (its default order: a seeded shuffle) against our ``libra`` at P = 16, on R24 and on
   ``synth-reddit --scale 0.1``.
3. The whole path with features for P = 16 on R24 with Reddit's width (602 features, 41
   classes): ``distgnn partition GRAPH.zarr --parts 16`` (assign + build every part, from the
   graph store) against DGL's ``dgl.distgnn.partition.partition_graph`` (from an in-memory
   DGLGraph with the same features). Both run in child processes: wall time, peak RSS and bytes
   written, beside the raw write rate of the output folder (``--outputs``: a tmpfs such as
   /dev/shm compares the software rather than the disk).

Every run happens in a child process so peak memory (``ru_maxrss``) is its own.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REDDIT_WIDTH, REDDIT_CLASSES = 602, 41


# ----------------------------------------------------------------------------- child processes
def _emit(result: dict) -> None:
    print("RESULT " + json.dumps(result), flush=True)


def child_ours_assign(graph: str, parts: int, method: str, threads: int, order: str | None) -> None:
    from bench.graphs import bench_graph
    from distgnn.partition.assign import compute_assignment

    if graph.endswith(".zarr"):
        from distgnn.data.graph_store import GraphStore
        indptr, indices = GraphStore.open(graph).csr()
    else:
        indptr, indices = bench_graph(graph)
    start = time.perf_counter()
    result = compute_assignment(indptr, indices, parts, method, 0, None, threads, order=order)
    seconds = time.perf_counter() - start
    n = len(indptr) - 1
    _emit({"seconds": seconds, "rf": float(result.vertices.sum() / n),
           "edge_balance": float(result.edges.max() / result.edges.mean())})


def _dgl_graph(indptr: np.ndarray, indices: np.ndarray):
    import torch

    from distgnn.compat import import_dgl

    dgl = import_dgl()
    n = len(indptr) - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    return dgl, dgl.graph((torch.from_numpy(indices.astype(np.int64)), torch.from_numpy(dst)),
                          num_nodes=n)


def child_dgl_kernel(graph: str, parts: int, threads: int, workdir: str) -> None:
    import torch

    from bench.graphs import bench_graph

    torch.set_num_threads(threads)
    indptr, indices = bench_graph(graph)
    _, g = _dgl_graph(indptr, indices)
    from dgl._sparse_ops import libra_vertex_cut  # after import_dgl (compat shims)

    n = g.num_nodes()
    u, v = g.edges()
    degree = g.in_degrees() + g.out_degrees()
    out = torch.zeros(len(u), dtype=torch.int32)
    os.makedirs(workdir, exist_ok=True)
    print("START", flush=True)
    start = time.perf_counter()
    libra_vertex_cut(parts, degree, degree.clone(), torch.zeros(parts, dtype=torch.int64), u, v,
                     torch.ones(len(u), dtype=torch.int64), out, n, len(u), workdir)
    seconds = time.perf_counter() - start
    o = out.numpy().astype(np.int64)
    replicas = len(np.unique(np.concatenate([u.numpy() * parts + o, v.numpy() * parts + o])))
    _emit({"seconds": seconds, "rf": replicas / n})


def _reddit_like_store(work: Path) -> Path:
    """R24 with Reddit-wide features (deterministic) as a graph store; made once, reused."""
    from bench.graphs import bench_graph
    from distgnn.data.store_writer import write_graph_store
    from distgnn.data.source import GraphSource
    from distgnn.data.splits import random_split

    path = work / "R24" / "graph.zarr"
    if path.exists():
        return path
    indptr, indices = bench_graph("R24")
    n = len(indptr) - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    labels = np.random.default_rng(1).integers(0, REDDIT_CLASSES, n)

    def features(rows: int):
        for start in range(0, n, rows):
            count = min(rows, n - start)
            yield np.random.default_rng([2, start]).standard_normal((count, REDDIT_WIDTH),
                                                                    dtype=np.float32)

    source = GraphSource(name="R24", num_nodes=n, num_classes=REDDIT_CLASSES,
                         feat_dim=REDDIT_WIDTH, edges=lambda: iter([(indices, dst)]),
                         features=features, labels=labels,
                         masks=random_split(n, (0.66, 0.1, 0.24), 0), source="bench",
                         directed=True)
    return write_graph_store(source, path, threads=2)


def child_ours_whole(graph: str, parts: int, threads: int, out: str) -> None:
    from distgnn.partition.assign import assign_graph
    from distgnn.partition.part_writer import build_all
    from distgnn.progress import set_quiet

    set_quiet(True)
    start = time.perf_counter()
    folder, attrs = assign_graph(graph, parts, "libra", 0, out, threads, overwrite=True)
    build_all(folder, threads)
    _emit({"seconds": time.perf_counter() - start, "rf": attrs["replication_factor"],
           "assign_seconds": attrs["assign_seconds"]})


def child_dgl_whole(graph: str, parts: int, threads: int, out: str) -> None:
    import contextlib
    import io

    import torch

    from distgnn.data.graph_store import GraphStore

    torch.set_num_threads(threads)
    store = GraphStore.open(graph)
    indptr, indices = store.csr()
    dgl, g = _dgl_graph(indptr, indices)
    g.ndata["features"] = torch.from_numpy(store["feat"][:].astype(np.float32, copy=False))
    g.ndata["label"] = torch.from_numpy(store["label"][:])
    for m in ("train_mask", "val_mask", "test_mask"):
        g.ndata[m] = torch.from_numpy(store[m][:])
    from dgl.distgnn.partition import partition_graph

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        partition_graph(parts, g, out)
    _emit({"seconds": time.perf_counter() - start})


CHILDREN = {"ours-assign": child_ours_assign, "dgl-kernel": child_dgl_kernel,
            "ours-whole": child_ours_whole, "dgl-whole": child_dgl_whole}


# ----------------------------------------------------------------------------- parent
def run_child(kind: str, *args, threads: int, watch: Path | None = None) -> dict:
    """Run one child; return its result plus peak RSS (bytes) and, when ``watch`` names a file,
    the time from the child's START line until that file appears (``loop_seconds``)."""
    import shutil
    import threading

    if watch is not None:
        shutil.rmtree(watch.parent, ignore_errors=True)
    marks: dict[str, float] = {}
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            if "start" in marks and watch.exists():
                marks["file"] = time.perf_counter()
                return
            time.sleep(0.005)

    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "bench.partition", "--child", kind, *map(str, args)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=Path(__file__).resolve().parent.parent)
    poller = threading.Thread(target=poll, daemon=True)
    if watch is not None:
        poller.start()
    result = None
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        if line.startswith("START"):
            marks["start"] = time.perf_counter()
        elif line.startswith("RESULT "):
            result = json.loads(line[7:])
    done.set()
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace")
    if result is None or status != 0:
        raise RuntimeError(f"child {kind} failed:\n{err[-3000:]}")
    result["peak_rss"] = usage.ru_maxrss * 1024
    if "file" in marks:
        result["loop_seconds"] = marks["file"] - marks["start"]
    return result


def gib(x: float) -> str:
    return f"{x / 2**30:.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parts", default="2,4,8,16")
    parser.add_argument("--repeats", type=int, default=3, help="DGL runs per P (mean RF)")
    parser.add_argument("--work", help="scratch folder (default: a temporary one)")
    parser.add_argument("--sections", default="1,2,3")
    parser.add_argument("--whole-repeats", type=int, default=2,
                        help="section 3: runs of each whole path (fastest kept)")
    parser.add_argument("--outputs", help="section 3: folder both sides write their partitions to "
                                          "(default: --work; e.g. /dev/shm takes the disk out)")
    parser.add_argument("--products", help="synth-products graph.zarr: partition it into 16 parts")
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        fn = CHILDREN[kind]
        types = fn.__annotations__
        names = [p for p in types if p != "return"]
        values = []
        for name, raw in zip(names, rest):
            values.append(int(raw) if types[name] == "int" else (None if raw == "None" else raw))
        fn(*values)
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-partition-"))
    work.mkdir(parents=True, exist_ok=True)
    threads = args.threads
    if args.products:
        products(args.products, work, threads)
        return
    sections = set(args.sections.split(","))
    if "1" in sections:
        print(f"== 1. libra on R24, store order, {threads} threads: ours vs DGL libra_vertex_cut "
              f"(mean of {args.repeats})", flush=True)
        print(f"{'P':>3} {'RF ours':>8} {'RF DGL':>16} {'ours/DGL':>9} {'t ours':>8} "
              f"{'t DGL kernel':>13} {'t DGL loop':>11} {'speedup':>8} {'vs loop':>8}")
        for parts in [int(p) for p in args.parts.split(",")]:
            ours = [run_child("ours-assign", "R24", parts, "libra", threads, "store",
                              threads=threads) for _ in range(2)]
            dgl = [run_child("dgl-kernel", "R24", parts, threads, str(work / f"dgl-{parts}"),
                             threads=threads, watch=work / f"dgl-{parts}" / "community0.txt")
                   for _ in range(args.repeats)]
            rf_dgl = np.array([d["rf"] for d in dgl])
            t_ours = min(o["seconds"] for o in ours)
            t_dgl = float(np.median([d["seconds"] for d in dgl]))
            t_loop = float(np.median([d.get("loop_seconds", np.nan) for d in dgl]))
            print(f"{parts:>3} {ours[0]['rf']:>8.4f} {rf_dgl.mean():>8.4f}+-{rf_dgl.std():.4f} "
                  f"{ours[0]['rf'] / rf_dgl.mean():>9.4f} {t_ours:>7.2f}s {t_dgl:>12.2f}s "
                  f"{t_loop:>10.2f}s {t_dgl / t_ours:>7.1f}x {t_loop / t_ours:>7.1f}x", flush=True)
    if "2" in sections:
        print(f"\n== 2. hdrf (shuffled order) vs libra (store order) at P = 16", flush=True)
        reddit = work / "synth-reddit-x0.1" / "graph.zarr"
        if not reddit.exists():
            from distgnn.data.store_writer import write_graph_store
            from distgnn.data.synthetic import make_twin
            write_graph_store(make_twin("synth-reddit", 0.1, 0), reddit, threads=threads)
        print(f"{'graph':>18} {'RF libra':>9} {'RF libra shuf':>14} {'RF hdrf':>8} "
              f"{'hdrf/libra':>11} {'t libra':>8} {'t hdrf':>8}")
        for graph in ("R24", str(reddit)):
            res = {spec: run_child("ours-assign", graph, 16, spec.split(":")[0], threads,
                                   spec.split(":")[1], threads=threads)
                   for spec in ("libra:store", "libra:shuffle", "hdrf:shuffle")}
            label = "R24" if graph == "R24" else "synth-reddit x0.1"
            print(f"{label:>18} {res['libra:store']['rf']:>9.4f} {res['libra:shuffle']['rf']:>14.4f} "
                  f"{res['hdrf:shuffle']['rf']:>8.4f} "
                  f"{res['hdrf:shuffle']['rf'] / res['libra:store']['rf']:>11.4f} "
                  f"{res['libra:store']['seconds']:>7.2f}s {res['hdrf:shuffle']['seconds']:>7.2f}s",
                  flush=True)
    if "3" in sections:
        print(f"\n== 3. whole path with features, R24 x {REDDIT_WIDTH} features, P = 16", flush=True)
        graph = _reddit_like_store(work)
        outputs = Path(args.outputs or work)
        outputs.mkdir(parents=True, exist_ok=True)
        print(f"outputs in {outputs}: raw write rate there {write_rate(outputs):.2f} GB/s "
              f"(1 GiB in 8 MiB files, no fsync)", flush=True)
        import shutil

        from distgnn.zarr_io import store_bytes
        written: dict[str, tuple[dict, int]] = {}
        for _ in range(args.whole_repeats):  # alternating; the fastest of each kept
            for kind, name in (("ours-whole", "ours-16"), ("dgl-whole", "dgl-whole")):
                shutil.rmtree(outputs / name, ignore_errors=True)  # neither side pays for removal
                res = run_child(kind, str(graph), 16, threads, str(outputs / name), threads=threads)
                if kind not in written or res["seconds"] < written[kind][0]["seconds"]:
                    written[kind] = (res, store_bytes(outputs / name))
                shutil.rmtree(outputs / name, ignore_errors=True)  # room for the other (tmpfs)
        (ours, ours_bytes), (dgl, dgl_bytes) = written["ours-whole"], written["dgl-whole"]
        print(f"ours: {ours['seconds']:.1f} s (assign {ours['assign_seconds']:.1f} s), peak "
              f"{gib(ours['peak_rss'])}, RF {ours['rf']:.4f}, wrote {ours_bytes / 1e9:.2f} GB")
        print(f"DGL : {dgl['seconds']:.1f} s, peak {gib(dgl['peak_rss'])}, wrote {dgl_bytes / 1e9:.2f} GB")
        print(f"speedup {dgl['seconds'] / ours['seconds']:.1f}x (fastest of {args.whole_repeats} each)",
              flush=True)


def write_rate(folder: Path, total: int = 2 ** 30, block: int = 8 * 2 ** 20) -> float:
    """GB/s of plain file writes into ``folder`` (page cache included, as the partitioners see it)."""
    import shutil

    probe = folder / "write-rate-probe"
    probe.mkdir(exist_ok=True)
    data = np.random.default_rng(0).bytes(block)
    start = time.perf_counter()
    for i in range(total // block):
        (probe / str(i)).write_bytes(data)
    seconds = time.perf_counter() - start
    shutil.rmtree(probe)
    return total / seconds / 1e9


def products(graph: str, work: Path, threads: int) -> None:
    """synth-products into 16 parts: wall time, peak RSS against 3x (indptr + indices) bytes."""
    import zarr

    group = zarr.open_group(graph, mode="r")
    structure = (group["indptr"].nbytes + group["indices"].nbytes)
    res = run_child("ours-whole", graph, 16, threads, str(work / "products-16"), threads=threads)
    print(f"synth-products -> 16 parts: {res['seconds']:.1f} s (assign {res['assign_seconds']:.1f} s), "
          f"RF {res['rf']:.4f}, peak RSS {gib(res['peak_rss'])} = "
          f"{res['peak_rss'] / structure:.2f} x indptr+indices ({gib(structure)})")


if __name__ == "__main__":
    main()
