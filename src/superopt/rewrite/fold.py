"""Constant folding of weight-only subgraphs.

Rewrites such as batch-norm folding or merging matmuls leave computations whose inputs
are all weights (concatenated or rescaled weights). A compiler evaluates those once; so
does `fold_weights`: every weight-only value that a runtime op reads (or that is a graph
output) becomes a new weight whose data is computed with the reference interpreter.

Weights without data are drawn by the interpreters from (seed, name); folding a
computation over such a weight fixes the drawn value into the new weight's data
(`materialize`, on by default), which is exactly the value every interpreter and the torch
backend would use for it, so the folded graph computes the same values as the unfolded
one. With `materialize=False` only computations over weights that have data are folded.

`fold_weights(graph, evaluate=False)` folds structurally (new weights without data): a
graph fit for costing, not for running.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np

from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.interpret import interpret
from superopt.ir.opdef import SOURCE, get_op
from superopt.ir.passes import Lookup, Origin, PassResult, copy_node, transform

_FLAGS: weakref.WeakKeyDictionary[Graph, tuple[bool, ...]] = weakref.WeakKeyDictionary()


def weight_only(graph: Graph) -> tuple[bool, ...]:
    """Per node: does its value depend on weights and constants only (no graph input)?"""
    flags = _FLAGS.get(graph)
    if flags is None:
        out: list[bool] = []
        for n in graph.nodes:
            if n.op == "input":
                out.append(False)
            elif get_op(n.op).has(SOURCE):
                out.append(True)
            else:
                out.append(all(out[v.node] for v in n.inputs))
        flags = tuple(out)
        _FLAGS[graph] = flags
    return flags


def runtime_ops(graph: Graph) -> int:
    """Ops that run when the graph runs: neither sources nor weight-only."""
    flags = weight_only(graph)
    return sum(1 for n in graph.nodes if not flags[n.id] and n.op != "input")


def foldable_values(graph: Graph) -> list[Value]:
    """Weight-only values computed by an op and read by a runtime op or the caller."""
    flags = weight_only(graph)
    wanted: dict[Value, None] = {}
    for n in graph.nodes:
        if flags[n.id]:
            continue
        for v in n.inputs:
            if flags[v.node] and not graph.nodes[v.node].is_source:
                wanted[v] = None
    for v in graph.outputs:
        if flags[v.node] and not graph.nodes[v.node].is_source:
            wanted[v] = None
    return list(wanted)


def foldable_hashes(graph: Graph) -> frozenset[bytes]:
    """Structural hashes of the nodes behind `graph`'s foldable values: the `skip` that
    keeps a model's own weight-only computations computed when a rewritten copy of it is
    folded (only what the rewrites made weight-only is folded)."""
    hashes = graph.node_hashes
    return frozenset(hashes[v.node] for v in foldable_values(graph))


@dataclass(frozen=True)
class FoldResult(PassResult):
    folded: int = 0  # values turned into weights
    kept: int = 0  # foldable values left as ops (a source without data, materialize off)


def _ancestors(graph: Graph, values: list[Value]) -> list[int]:
    seen: set[int] = set()
    stack = [v.node for v in values]
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(v.node for v in graph.nodes[i].inputs)
    return sorted(seen)


def _evaluate(graph: Graph, values: list[Value], seed: int) -> dict[Value, np.ndarray]:
    """Values of weight-only `values`, computed on the subgraph that produces them."""
    b = GraphBuilder(f"{graph.name}.weights")
    mapped: dict[Value, Value] = {}
    for i in _ancestors(graph, values):
        node = graph.nodes[i]
        outs = copy_node(b, node, tuple(mapped[v] for v in node.inputs), graph)
        for k, v in enumerate(outs):
            mapped[Value(i, k)] = v
    sub = b.build([mapped[v] for v in values])
    results = interpret(sub, seed=seed)
    assert isinstance(results, tuple)
    return {v: np.asarray(r) for v, r in zip(values, results, strict=True)}


def fold_weights(graph: Graph, *, evaluate: bool = True, materialize: bool = True,
                 seed: int = 0, prefix: str = "folded",
                 skip: frozenset[bytes] = frozenset(), exact: bool = False) -> FoldResult:
    """Replace weight-only computations by weights (see the module docstring). Values of
    nodes whose structural hash is in `skip` stay computed (a tuner folds only what its
    rewrites created, so the default program stays the default compiler's). The folded
    data is stored in each weight's dtype (float32 for f32); `exact` keeps it as the
    reference interpreter computed it (float64), for a value check that tells the fold's
    arithmetic from the rounding of its storage."""
    frontier = foldable_values(graph)
    if skip:
        hashes = graph.node_hashes
        frontier = [v for v in frontier if hashes[v.node] not in skip]
    if not frontier:
        return FoldResult(graph, MappingProxyType({n.id: (n.id,) for n in graph.nodes}))
    kept = 0
    if evaluate and not materialize:
        ok: list[Value] = []
        for v in frontier:
            sources = [graph.nodes[i] for i in _ancestors(graph, [v])
                       if graph.nodes[i].op == "weight"]
            if all(n.attr("name") in graph.weights for n in sources):
                ok.append(v)
            else:
                kept += 1
        frontier = ok
    data: Mapping[Value, np.ndarray] = _evaluate(graph, frontier, seed) if evaluate and frontier \
        else {}
    names = {n.attr("name") for n in graph.nodes if n.is_named_source}
    hashes = graph.node_hashes
    new_names: dict[Value, str] = {}
    for v in frontier:
        base = f"{prefix}.{hashes[v.node].hex()[:12]}" + (f".{v.index}" if v.index else "")
        name, k = base, 1
        while name in names:
            name, k = f"{base}~{k}", k + 1
        names.add(name)
        new_names[v] = name
    by_node: dict[int, list[Value]] = {}
    for v in frontier:
        by_node.setdefault(v.node, []).append(v)

    def rule(b: GraphBuilder, node: Node, inputs: tuple[Value, ...], lookup: Lookup
             ) -> tuple[Value, ...] | None:
        vals = by_node.get(node.id)
        if not vals:
            return None
        base = copy_node(b, node, inputs, graph)
        out = list(base)
        for v in vals:
            t = node.types[v.index]
            arr = None
            if v in data:
                arr = np.asarray(data[v], dtype=None if exact and t.dtype.is_float
                                 else t.dtype.numpy).reshape(t.shape)
            out[v.index] = b.weight(new_names[v], t.shape, t.dtype, data=arr,
                                    init="normal")
        return tuple(out)

    result = transform(graph, rule)
    origin: Origin = result.origin
    return FoldResult(result.graph, origin, folded=len(frontier), kept=kept)

def stored(exact: Graph, source: Graph) -> Graph:
    """`exact`, a `fold_weights(source, exact=True)` graph, with the data it folded cast to
    each weight's dtype: the graph `fold_weights(source)` gives, without evaluating the
    weight-only parts a second time (a value check wants both)."""
    dtypes = {n.attr("name"): n.type.dtype.numpy for n in exact.weight_nodes}
    weights = {name: (arr if name in source.weights else
                      np.asarray(arr, dtype=dtypes[name]))
               for name, arr in exact.weights.items()}
    for arr in weights.values():
        arr.setflags(write=False)
    return replace(exact, weights=MappingProxyType(weights))

