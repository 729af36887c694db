"""The pass contract: a pass maps a graph to `(new_graph, origin)`.

`origin[new_id]` is the tuple of node ids of the input graph that the new node came from
(empty for nodes a pass invents from nothing). XTAT uses it to carry per-node choices
across a changed graph. `transform` implements the bookkeeping once for every pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from superopt.ir.graph import Graph, GraphBuilder, Node, Value

Origin = Mapping[int, tuple[int, ...]]

# A node rule gets the builder, the old node, its already-mapped inputs and a lookup from
# any earlier old value to its new value (fusions reach past their direct inputs); it
# returns the values that replace the node's outputs, or None to copy the node unchanged.
Lookup = Callable[[Value], Value]
NodeRule = Callable[[GraphBuilder, Node, tuple[Value, ...], Lookup], tuple[Value, ...] | None]


@dataclass(frozen=True)
class PassResult:
    graph: Graph
    origin: Origin


def copy_node(b: GraphBuilder, node: Node, inputs: tuple[Value, ...], graph: Graph) -> tuple[Value, ...]:
    data = graph.weights.get(node.attr("name")) if node.op == "weight" else None
    return b.recreate(node, inputs, tuple(graph.type_of(v) for v in node.inputs), data)


def transform(graph: Graph, rule: NodeRule, name: str | None = None) -> PassResult:
    """Rebuild `graph` node by node through `rule`, tracking origins and removing dead nodes."""
    b = GraphBuilder(name or graph.name)
    mapped: dict[Value, Value] = {}
    origin: dict[int, set[int]] = {}
    for node in graph.nodes:
        start = len(b.nodes)
        inputs = tuple(mapped[v] for v in node.inputs)
        new = rule(b, node, inputs, mapped.__getitem__)
        if new is None:
            new = copy_node(b, node, inputs, graph)
        if len(new) != len(node.types):
            raise ValueError(f"pass rule for {node.op} %{node.id} returned {len(new)} values "
                             f"for {len(node.types)} outputs")
        for i, v in enumerate(new):
            mapped[Value(node.id, i)] = v
        for nid in range(start, len(b.nodes)):
            origin.setdefault(nid, set()).add(node.id)
        for v in new:  # reused (hash-consed) nodes also descend from this node
            origin.setdefault(v.node, set()).add(node.id)
    out, remap = b.build_with_map([mapped[v] for v in graph.outputs], name or graph.name)
    final = {remap[k]: tuple(sorted(v)) for k, v in origin.items() if k in remap}
    return PassResult(out, MappingProxyType(final))


def identity_origin(graph: Graph) -> Origin:
    return MappingProxyType({n.id: (n.id,) for n in graph.nodes})


def compose(first: Origin, second: Origin) -> Origin:
    """Origin of two passes run in sequence: new -> intermediate -> original."""
    return MappingProxyType({
        k: tuple(sorted({o for m in mids for o in first.get(m, ())}))
        for k, mids in second.items()})
