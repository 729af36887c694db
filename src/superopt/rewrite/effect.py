"""What applying a site would add and remove, computed without rebuilding the graph.

The target is "built" abstractly against the graph's hash-consing index: a target node
equal to an existing node reuses it (and keeps it alive), any other is new. The nodes that
die are the source's outputs (their readers now read the target) and, transitively, every
node whose readers all died, unless the target reuses it. For an additive cost the change
in cost is then exact: the new nodes' costs minus the dead nodes' costs. The optimizer uses
this to price every candidate rewrite of a graph before building any of them.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from superopt.ir.graph import AttrItems, Graph, Value
from superopt.ir.opdef import get_op
from superopt.ir.types import TensorType
from superopt.rewrite.cost import AdditiveCost
from superopt.rewrite.fold import weight_only
from superopt.rewrite.match import Site
from superopt.rewrite.terms import resolve
from superopt.substitutions.pattern import Pattern, PVar
from superopt.substitutions.rule import Rule

NodeKey = tuple[str, tuple[Any, ...], AttrItems]


@dataclass(frozen=True, eq=False)
class GraphIndex:
    """A graph's hash-consing keys, reader counts and weight-only flags."""

    keys: Mapping[NodeKey, int]
    readers: tuple[int, ...]  # distinct consumer nodes, plus one if the node is an output
    weight_only: tuple[bool, ...]
    output_values: frozenset[Value]


_INDEX: weakref.WeakKeyDictionary[Graph, GraphIndex] = weakref.WeakKeyDictionary()


def graph_index(graph: Graph) -> GraphIndex:
    idx = _INDEX.get(graph)
    if idx is None:
        outs = {v.node for v in graph.outputs}
        readers = tuple(len(c) + (1 if i in outs else 0) for i, c in enumerate(graph.consumers))
        idx = GraphIndex({n.key: n.id for n in graph.nodes}, readers, weight_only(graph),
                         frozenset(graph.outputs))
        _INDEX[graph] = idx
    return idx


@dataclass(frozen=True)
class NewNode:
    op: str
    attrs: AttrItems
    ins: tuple[TensorType, ...]
    outs: tuple[TensorType, ...]
    weight_only: bool
    weight_ins: tuple[bool, ...]  # per input: a weight-only value (see AdditiveCost)


@dataclass(frozen=True)
class SiteEffect:
    """New nodes the site's target creates and old nodes that die when it is applied."""

    added: tuple[NewNode, ...]
    removed: tuple[int, ...]

    @property
    def node_delta(self) -> int:
        return len(self.added) - len(self.removed)

    def runtime_delta(self, graph: Graph) -> int:
        """Change in the number of runtime ops (not sources, not weight-only)."""
        wo = graph_index(graph).weight_only
        return sum(1 for n in self.added if not n.weight_only) - \
            sum(1 for i in self.removed if not wo[i])

    def cost_delta(self, graph: Graph, cost: AdditiveCost) -> float:
        free = cost.free(graph)
        gained = sum(cost.op_cost(n.op, n.attrs, n.ins, n.outs, n.weight_ins) for n in self.added
                     if not (cost.fold and n.weight_only))
        lost = sum(cost.node_cost(graph, graph.nodes[i]) for i in self.removed if not free[i])
        return gained - lost


# An abstract target value: an existing graph value, or output k of new node j.
_Abs = tuple[str, int, int]


def site_effect(graph: Graph, site: Site, rule: Rule) -> SiteEffect:
    idx = graph_index(graph)
    tensors = dict(site.tensors)
    attrs = dict(site.attrs)
    env: dict[str, Any] = {k: graph.type_of(v) for k, v in tensors.items()}
    env.update(attrs)
    added: list[NewNode] = []
    new_keys: dict[NodeKey, int] = {}
    reused: set[int] = set()

    def type_of(a: _Abs) -> TensorType:
        kind, i, k = a
        return graph.nodes[i].types[k] if kind == "old" else added[i].outs[k]

    def only_weights(a: _Abs) -> bool:
        kind, i, _ = a
        return idx.weight_only[i] if kind == "old" else added[i].weight_only

    def go(p: Pattern) -> _Abs:
        if isinstance(p, PVar):
            v = tensors[p.name]
            reused.add(v.node)
            return ("old", v.node, v.index)
        kids = tuple(go(c) for c in p.children)
        op = get_op(p.op)
        ins = tuple(type_of(c) for c in kids)
        checked = op.check_attrs(resolve(p, env, attrs))
        if op.canonicalize is not None:
            checked = op.canonicalize(ins, checked)
        items: AttrItems = tuple(sorted(checked.items()))
        if all(c[0] == "old" for c in kids):
            key: NodeKey = (p.op, tuple(Value(c[1], c[2]) for c in kids), items)
            found = idx.keys.get(key)
            if found is not None:
                reused.add(found)
                return ("old", found, p.output)
        else:
            key = (p.op, kids, items)
        j = new_keys.get(key)
        if j is None:
            outs = tuple(op.shape(ins, checked))
            # Constants (no operands) count as weights, as in `weight_only`.
            flags = tuple(only_weights(c) for c in kids)
            added.append(NewNode(p.op, items, ins, outs, all(flags), flags))
            j = len(added) - 1
            new_keys[key] = j
        return ("new", j, p.output)

    for pat in rule.target:
        go(pat)
    roots = set(site.roots)
    root_nodes = {v.node for v in roots}
    # Readers left once the outputs' readers are redirected to the target.
    left: dict[int, int] = {}
    for r in root_nodes:
        count = sum(1 for c in graph.consumers[r]
                    if any(v.node == r and v not in roots for v in graph.nodes[c].inputs))
        count += sum(1 for v in graph.outputs if v.node == r and v not in roots)
        left[r] = count
    dead: list[int] = []
    stack = [r for r in root_nodes if left[r] == 0 and r not in reused]
    marked = set(stack)
    while stack:
        i = stack.pop()
        dead.append(i)
        for u in {v.node for v in graph.nodes[i].inputs}:
            if u in marked:
                continue
            n_left = left.get(u, idx.readers[u]) - 1
            left[u] = n_left
            if n_left == 0 and u not in reused and graph.nodes[u].op != "input":
                marked.add(u)
                stack.append(u)
    return SiteEffect(tuple(added), tuple(sorted(dead)))
