"""The package's structure (docs/design.md#architecture): its floors, each module importing only
from its own floor and those below; no import cycle between distgnn's modules; no private name
imported across modules; and the two aggregation modes implementing the one protocol the trainer
uses (docs/design.md#exchange-architecture)."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "distgnn"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
#: compiled modules of the package (imported by name like any module)
EXTENSIONS = {"_native"}


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import in ``path``, at any depth (an
    import inside a function is an edge too); relative imports resolved."""
    tree = ast.parse(path.read_text())
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names]))
    return found


def edges() -> dict[str, set[str]]:
    """distgnn module -> the distgnn modules it imports (``from pkg import sub`` counts as sub)."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for target, names in imports(path):
            if target not in MODULES:
                continue
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            graph[name].update(subs or [target])
            if len(subs) < len(names):   # names from the package's own namespace
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


#: The floors, bottom first (docs/design.md#architecture): a module belongs to the floor of the
#: longest prefix listed, and imports only from its own floor and those below. The package's own
#: ``__init__`` (its lazy ``distgnn.train_model``) sits on the top floor with the commands.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("distgnn.errors", "distgnn.vocabulary", "distgnn.options", "distgnn.atomic",
              "distgnn.progress", "distgnn.zarr_io", "distgnn.host_memory", "distgnn.preflight",
              "distgnn.compat", "distgnn.timers", "distgnn.owned_folder", "distgnn.cpu_precision",
              "distgnn.thread_pinning")),
    ("kernels", ("distgnn.kernels",)),
    ("comm", ("distgnn.comm", "distgnn.row_exchange")),
    ("stores", ("distgnn.data", "distgnn.partition")),
    ("exchange", ("distgnn.exchange",)),
    ("models", ("distgnn.models",)),
    ("estimates", ("distgnn.scaling",)),
    ("train", ("distgnn.train",)),
    ("commands", ("distgnn.launch", "distgnn.report", "distgnn.commands", "distgnn.cli",
                  "distgnn.api", "distgnn.workflow_config", "distgnn.__main__", "distgnn")),
)


def floor_of(name: str) -> int | None:
    """The index in :data:`FLOORS` of module ``name`` (None: on no floor)."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), index)
    return None if best is None else best[1]


def floor_edges() -> dict[str, set[str]]:
    """:func:`edges` without the compiled module (``from distgnn import _native`` is the kernels'
    own library, not the package's top floor)."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for target, names in imports(path):
            if target not in MODULES:
                continue
            kept = [n for n in names if n not in EXTENSIONS]
            subs = [f"{target}.{n}" for n in kept if f"{target}.{n}" in MODULES]
            graph[name].update(subs)
            if len(subs) < len(kept) or not names:   # names of the package's namespace, or `import`
                graph[name].add(target)
    return graph


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module on a higher floor, as ``a (floor) -> b (floor)``."""
    return sorted(f"{a} ({FLOORS[floor_of(a)][0]}) -> {b} ({FLOORS[floor_of(b)][0]})"
                  for a, targets in graph.items() for b in targets
                  if floor_of(b) > floor_of(a))


def test_every_module_is_on_a_floor() -> None:
    assert [name for name in MODULES if floor_of(name) is None] == []


def test_no_module_imports_a_higher_floor() -> None:
    assert upward(floor_edges()) == []


def test_the_floor_check_finds_an_upward_import() -> None:
    graph = {name: set() for name in MODULES}
    graph["distgnn.exchange.root"] = {"distgnn.train.config"}
    assert upward(graph) == ["distgnn.exchange.root (exchange) -> distgnn.train.config (train)"]


def package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def test_no_import_cycle() -> None:
    graph = edges()
    # a package's __init__ re-exporting its submodules is not a cycle with them
    for name in graph:
        graph[name] = {t for t in graph[name]
                       if not (MODULES[t].name == "__init__.py" and package_of(name).startswith(t))}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_private_name_is_imported_across_modules() -> None:
    offenders = [f"{name} imports {target}.{n}"
                 for name, path in MODULES.items()
                 for target, names in imports(path) if target.startswith("distgnn")
                 for n in names if n.startswith("_") and not n.startswith("__")
                 and f"{target}.{n}" not in MODULES and n not in EXTENSIONS]
    assert offenders == []


@pytest.mark.parametrize("mode", ["ReplicaAggregation", "RootAggregation"])
def test_each_mode_implements_the_protocol(mode: str) -> None:
    import distgnn.exchange as exchange
    from distgnn.exchange.protocol import Aggregation

    cls = getattr(exchange, mode)
    methods = [name for name, member in vars(Aggregation).items()
               if callable(member) and not name.startswith("_") or name == "__call__"]
    assert {"__call__", "attention", "input_aggregate", "state_dict", "finish"} <= set(methods)
    for name in methods:
        ours, theirs = inspect.signature(getattr(cls, name)), inspect.signature(getattr(Aggregation, name))
        assert list(ours.parameters)[:len(theirs.parameters)] == list(theirs.parameters), name
    source = inspect.getsource(cls)
    for attribute in Aggregation.__annotations__:   # rows, training: set by the mode itself
        assert f"self.{attribute} = " in source or f"self.{attribute}, " in source or \
            f", self.{attribute} = " in source, attribute
