"""Correction regions and the programs that recompute them from the original.

`correction_regions` covers the wrong boxes of an output with few rectangles (each grown
greedily over wrong boxes only, so no correct position is recomputed without need).
`RegionBuilder` builds, into a graph builder, the original program restricted to an
output region: every op's `restrict` rule (table "boxes") asks for the input regions
that feed it, down to slices of the sources, so a correction kernel reads only the
input slice its region depends on. An op without a restriction for some region is
computed in full and sliced (exact, only slower).
"""

from __future__ import annotations

import numpy as np

from superopt.ir.graph import Graph, GraphBuilder, Value
from superopt.ir.passes import copy_node
from superopt.mutants.boxes import (
    TABLE,
    Region,
    full_region,
    intervals,
    region_shape,
    slice_region,
)
from superopt.mutants.boxtest import OutputBoxes


def correction_regions(out: OutputBoxes) -> list[Region]:
    """Rectangles of whole boxes covering every wrong box and no equal one."""
    wrong = ~out.equal
    covered = np.zeros_like(wrong)
    spans = [intervals(out.grid[d], s) for d, s in enumerate(out.shape)]
    regions: list[Region] = []
    rank = wrong.ndim
    for idx in np.argwhere(wrong):
        if covered[tuple(idx)]:
            continue
        lo = [int(i) for i in idx]
        hi = [int(i) + 1 for i in idx]

        def slab(d: int, at: int, lo: list[int] = lo, hi: list[int] = hi) -> tuple[slice, ...]:
            return tuple(slice(at, at + 1) if e == d else slice(lo[e], hi[e])
                         for e in range(rank))

        # Grow the trailing dims first: wrong boxes usually form rows, columns or planes.
        for d in reversed(range(rank)):
            while hi[d] < wrong.shape[d] and wrong[slab(d, hi[d])].all():
                hi[d] += 1
            while lo[d] > 0 and wrong[slab(d, lo[d] - 1)].all():
                lo[d] -= 1
        covered[tuple(slice(a, z) for a, z in zip(lo, hi, strict=True))] = True
        regions.append(tuple((spans[d][lo[d]][0], spans[d][hi[d] - 1][1]) for d in range(rank)))
    return regions


def copy_sources(b: GraphBuilder, graph: Graph) -> dict[str, Value]:
    """The graph's inputs and weights, created in `b` (hash-consed by name)."""
    return {n.attr("name"): copy_node(b, n, (), graph)[0] for n in graph.nodes
            if n.is_named_source}


class RegionBuilder:
    """Builds values of `graph` (in full or on a region) into builder `b` over `sources`."""

    def __init__(self, b: GraphBuilder, graph: Graph, sources: dict[str, Value]) -> None:
        self.b, self.graph, self.sources = b, graph, sources
        self._full: dict[Value, Value] = {}
        self._regions: dict[tuple[Value, Region], Value] = {}
        self.fallbacks = 0  # regions computed in full and sliced

    def full(self, v: Value) -> Value:
        if v in self._full:
            return self._full[v]
        node = self.graph.node(v.node)
        if node.is_named_source:
            out = (self.sources[node.attr("name")],)
        else:
            out = self.b.add(node.op, tuple(self.full(u) for u in node.inputs), node.a)
        for i, x in enumerate(out):
            self._full[type(v)(node.id, i)] = x
        return self._full[v]

    def region(self, v: Value, region: Region) -> Value:
        shape = self.graph.type_of(v).shape
        if region == full_region(shape):
            return self.full(v)
        key = (v, region)
        if key in self._regions:
            return self._regions[key]
        node = self.graph.node(v.node)
        out: Value | None = None
        if not node.is_named_source:
            rule = TABLE.get(node.op)
            if rule.restrict is not None:
                ins = tuple(self.graph.type_of(u) for u in node.inputs)
                out = rule.restrict(self.b, node, ins, v.index, region,
                                    lambda i, r: self.region(node.inputs[i], r))
        if out is None:
            if not node.is_named_source:
                self.fallbacks += 1
            out = slice_region(self.b, self.full(v), region)
        if self.b.shape(out) != region_shape(region):
            raise AssertionError(f"restriction of {node.op} %{node.id} to {region} has shape "
                                 f"{self.b.shape(out)}")
        self._regions[key] = out
        return out
