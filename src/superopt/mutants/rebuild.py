"""Building blocks for mutants: a lazy graph rebuild with per-node replacement, and the
composite reshape/transpose moves ("folds") that stacking, exchange and de-interleaving
transformations are made of."""

from __future__ import annotations

import math
from collections.abc import Callable

from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.passes import copy_node

Lookup = Callable[[Value], Value]
Replace = Callable[[GraphBuilder, Node, Lookup], tuple[Value, ...] | None]


def rebuild(graph: Graph, replace: Replace, name: str | None = None) -> Graph:
    """A copy of `graph` where `replace(b, node, get)` may return new values for a node's
    outputs (None: copy it). `get` maps any value of the old graph to the new graph, so a
    replacement may reach nodes anywhere (merges of several independent nodes)."""
    b = GraphBuilder(name or graph.name)
    done: dict[Value, Value] = {}

    def get(v: Value) -> Value:
        if v in done:
            return done[v]
        node = graph.node(v.node)
        new = replace(b, node, get)
        if new is None:
            new = copy_node(b, node, tuple(get(u) for u in node.inputs), graph)
        for i, nv in enumerate(new):
            done[Value(node.id, i)] = nv
        return done[v]

    for n in graph.inputs:  # keep every input, used or not, in the original order
        get(Value(n.id))
    outs = [get(v) for v in graph.outputs]
    return b.build(outs)


def fold(b: GraphBuilder, v: Value, src: int, k: int, src_outer: bool, dst: int,
         dst_outer: bool) -> Value:
    """Move a factor `k` of dim `src` into dim `dst` with one reshape/transpose/reshape.

    The factor is the outer part of `src` (index j*(d/k) + i: contiguous chunks) or the
    inner part (index i*k + j: interleaved residues); it becomes the outer (j*D + i) or
    inner (i*k + j) part of `dst`. `src == dst` reorders one dim (de-interleave or
    interleave); fold(dst, k, dst_outer, src, src_outer) undoes a fold.
    """
    shape = list(b.shape(v))
    if shape[src] % k:
        raise ValueError(f"fold: dim {src} of size {shape[src]} is not divisible by {k}")
    expanded = shape[:src] + ([k, shape[src] // k] if src_outer else [shape[src] // k, k]) \
        + shape[src + 1:]
    fa = src if src_outer else src + 1  # axis of the factor in the expanded shape
    rest = src + 1 if src_outer else src
    target = rest if dst == src else (dst if dst < src else dst + 1)
    order = [a for a in range(len(expanded)) if a != fa]
    pos = order.index(target)
    order.insert(pos if dst_outer else pos + 1, fa)
    final = [expanded[a] for a in order]
    merged: list[int] = []
    i = 0
    first = fa if dst_outer else target  # the pair (first, next) merges into dim dst
    while i < len(order):
        if order[i] == first:
            merged.append(final[i] * final[i + 1])
            i += 2
        else:
            merged.append(final[i])
            i += 1
    out = v
    if expanded != shape:
        out = b.reshape(out, shape=tuple(expanded))  # type: ignore[assignment]
    if order != sorted(order):
        out = b.transpose(out, perm=tuple(order))  # type: ignore[assignment]
    if tuple(merged) != b.shape(out):
        out = b.reshape(out, shape=tuple(merged))  # type: ignore[assignment]
    assert math.prod(merged) == math.prod(shape)
    return out
