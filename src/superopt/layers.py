"""The package's layers as data, and its import graph read from the source with `ast`.

`LAYERS` lists the layers bottom to top; a module belongs to the layer of the longest
prefix that names it (a module `a.b.c` matches the prefix `a.b`). The contract, held by
`tests/test_layers.py` and drawn by `tools/layers_diagram.py` into docs/architecture.md:

1. Arrows point down or sideways: a module imports (at module level, including imports
   under `if TYPE_CHECKING:`, which name a dependency of its interface) only modules of
   its own layer or of layers below it.
2. No cycle among modules, counting every import statement: at module level, under
   `TYPE_CHECKING`, and inside functions (a lazy import that closes a loop is a knot a
   reader has to untie as much as an eager one). `KNOWN_LAZY_CYCLES` would list a loop
   left on purpose (none is); the test fails on any other, and on a listed one once it
   is gone (so the list cannot go stale).

Imports by computed name (`importlib.import_module(f"...{name}")`, the strategy and cost
model registries) are not edges: the registry knows its plugins' names, not their code.
Only the standard library is used, so the test and the diagram need nothing installed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layer:
    name: str
    what: str  # one line for the diagram
    prefixes: tuple[str, ...]


LAYERS: tuple[Layer, ...] = (
    Layer("foundation", "the IR (graphs, op registry, semantics) and process plumbing",
          ("superopt.ir", "superopt.interrupts", "superopt.progress", "superopt.options",
           "superopt.executor", "superopt.layers")),
    Layer("io", "model zoo, importers, exporters, torch backend",
          ("superopt.zoo", "superopt.importers", "superopt.backends", "superopt.exporters")),
    Layer("tpu_sim.types", "simulator: shared types (Config, Flags, Tile), hardware, layouts, "
          "op tables",
          ("superopt.tpu_sim.hardware", "superopt.tpu_sim.layout", "superopt.tpu_sim.config",
           "superopt.tpu_sim.kernels", "superopt.tpu_sim.signature",
           "superopt.tpu_sim.op_costs", "superopt.tpu_sim.layout_rules",
           "superopt.tpu_sim.bounds_rules")),
    Layer("tpu_sim.cost", "simulator: kernel cost model (tile bounds, a kernel's time)",
          ("superopt.tpu_sim.bounds", "superopt.tpu_sim.kernel_time")),
    Layer("tpu_sim.passes", "simulator: compiler passes, and the KernelCosts cache they share",
          ("superopt.tpu_sim.layout_pass", "superopt.tpu_sim.fusion", "superopt.tpu_sim.tiling",
           "superopt.tpu_sim.flags", "superopt.tpu_sim.kernel_costs")),
    Layer("tpu_sim.driver", "simulator: compiler driver (pass order, timing, Simulator)",
          ("superopt.tpu_sim.pipeline", "superopt.tpu_sim.timing", "superopt.tpu_sim.simulator",
           "superopt.tpu_sim.compiler")),
    Layer("tpu_sim.entry", "simulator: simulate/measure/evaluate, replay, calibration, tools",
          ("superopt.tpu_sim.simulate", "superopt.tpu_sim.replay", "superopt.tpu_sim.calibration",
           "superopt.tpu_sim.incremental", "superopt.tpu_sim.synthetic", "superopt.tpu_sim.plot",
           "superopt.tpu_sim")),
    Layer("rules", "rules and their formats: patterns, text, readers, libraries, conditions",
          ("superopt.substitutions.rule", "superopt.substitutions.pattern",
           "superopt.substitutions.text", "superopt.substitutions.readers",
           "superopt.substitutions.library", "superopt.substitutions.conditions",
           "superopt.substitutions.symshape", "superopt.substitutions.presets",
           "superopt.substitutions.taso_pb")),
    Layer("verifier", "Z3 axioms, prover, random tester",
          ("superopt.verifier",)),
    Layer("search", "generator, rewrite engine and graph search, PET mutants and corrector",
          ("superopt.substitutions", "superopt.rewrite", "superopt.mutants",
           "superopt.corrector")),
    Layer("xtat", "the multi-pass tuner", ("superopt.xtat",)),
    Layer("front", "Python API, CLI, demo (and any module not placed above)",
          ("superopt.api", "superopt.cli", "superopt.demo", "superopt.__main__", "superopt")),
)

# Cycles closed only by function-level imports, each as its sorted modules, with why it is
# left. None now; an entry here lets the test pass with that loop and fails it once the
# loop is gone, so a loop that has to stay for a while is written down, not hidden.
KNOWN_LAZY_CYCLES: frozenset[tuple[str, ...]] = frozenset()

TOP, TYPE_ONLY, LAZY = "module", "type-checking", "function"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # TOP, TYPE_ONLY or LAZY
    line: int


def modules(root: Path) -> dict[str, Path]:
    """Every module under the package directory `root` by dotted name."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    """The module `name` (or the longest known module containing it: `a.b.f` -> `a.b`)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, package: str,
             known: Mapping[str, Path]) -> list[str | None]:
    """The package modules one import statement in `package` names."""
    if isinstance(node, ast.Import):
        return [_resolve(a.name, known) for a in node.names]
    if node.level:
        parts = package.split(".")
        mod = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module
                                                                 else []))
    else:
        mod = node.module or ""
    # `from pkg import sub` imports the module `pkg.sub`; `from mod import f`, `mod`.
    return [_resolve(f"{mod}.{a.name}", known) if f"{mod}.{a.name}" in known
            else _resolve(mod, known) for a in node.names]


def _visit(node: ast.AST, kind: str, name: str, package: str, known: Mapping[str, Path],
           out: list[Edge]) -> None:
    if isinstance(node, ast.Import | ast.ImportFrom):
        top = name.partition(".")[0]
        for t in _targets(node, package, known):
            if t is not None and t != name and (t == top or t.startswith(top + ".")):
                out.append(Edge(name, t, kind, node.lineno))
        return
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        kind = LAZY
    elif isinstance(node, ast.If) and kind == TOP and _is_type_checking(node):
        kind = TYPE_ONLY
    for child in ast.iter_child_nodes(node):
        _visit(child, kind, name, package, known, out)


def imports(root: Path) -> list[Edge]:
    """Every import of a package module by another, with where it stands in the file."""
    known = modules(root)
    edges: list[Edge] = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        _visit(tree, TOP, name, package, known, edges)
    return sorted(set(edges), key=lambda e: (e.source, e.target, e.line, e.kind))


def layer_of(module: str) -> int:
    """The index in `LAYERS` of the layer whose longest prefix names `module` (-1: none)."""
    best, found = -1, -1
    for i, layer in enumerate(LAYERS):
        for p in layer.prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, found = len(p), i
    return found


def cycles(edges: Iterable[Edge]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (each sorted), sorted:
    every import cycle lies inside one. Iterative Tarjan (no recursion limit to hit)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(tuple(sorted(comp)))
    return sorted(found)


def upward(edges: Iterable[Edge]) -> list[Edge]:
    """Module-level and type-checking imports that point to a higher layer."""
    return [e for e in edges if e.kind != LAZY and layer_of(e.target) > layer_of(e.source)]


def package_root() -> Path:
    return Path(__file__).parent


__all__ = ["KNOWN_LAZY_CYCLES", "LAYERS", "LAZY", "TOP", "TYPE_ONLY", "Edge", "Layer",
           "cycles", "imports", "layer_of", "modules", "package_root", "upward"]
