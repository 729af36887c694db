"""Kernel signatures: the cache key of a kernel's cost.

A `Signature` describes everything a kernel's cost depends on (ops, attributes, stored
types, layouts and the wiring inside the kernel), independent of node numbering: repeated
layers and re-evaluated configurations share one. Moved out of the old `cost.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from superopt.ir.graph import Graph, Value
from superopt.ir.types import TensorType
from superopt.tpu_sim.kernels import Kernel
from superopt.tpu_sim.layout import NodeLayouts

Ref = tuple[str, int, int]  # ("m", member, output) or ("x", external input, 0)


class Signature:
    """A kernel's cache key: a nested tuple describing everything its cost depends on, with
    the hash computed once (hashing the nested tuple on every lookup would dominate)."""

    __slots__ = ("_hash", "key")

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, Signature) and self._hash == other._hash
                                 and self.key == other.key)

    def __repr__(self) -> str:
        ops = "+".join(e[0] for e in self.key[0])
        return f"Signature({ops}, {len(self.key[1])} inputs, hash {self._hash & 0xFFFFFF:06x})"


class NodeTypes(Sequence[tuple[TensorType, ...]]):
    """Per node, its values' types, read from the graph on demand: the default when no
    stored types are given. (Listing them for every call made compiling quadratic in the
    graph's size: 30k nodes took 25 s instead of 1 s.)"""

    __slots__ = ("_nodes",)

    def __init__(self, graph: Graph) -> None:
        self._nodes = graph.nodes

    def __getitem__(self, i: int) -> tuple[TensorType, ...]:  # type: ignore[override]
        return self._nodes[i].types

    def __len__(self) -> int:
        return len(self._nodes)


def kernel_signature(graph: Graph, layouts: NodeLayouts, kernel: Kernel,
                     resolved: Mapping[int, Value],
                     stored: Sequence[tuple[TensorType, ...]] | None = None) -> Signature:
    """A hashable description of everything the kernel's cost depends on, independent of
    node numbering: two kernels with equal signatures cost the same.

    `stored` gives, per node, its values' types as stored (`Config.dtypes`) when they differ
    from the graph's; the cost model sees stored types only. Outputs are (member, output)
    pairs: the root's outputs, and the values of a multi-output fusion's other members."""
    local = {m: i for i, m in enumerate(kernel.nodes)}
    ext = {(v.node, v.index): j for j, v in enumerate(kernel.inputs)}
    nodes = graph.nodes
    per = layouts.per_node
    types_of = stored if stored is not None else NodeTypes(graph)
    entries = []
    for m in kernel.nodes:
        n = nodes[m]
        refs = []
        for v in n.inputs:
            r = resolved.get(v.node, v)
            li = local.get(r.node)
            ref: Ref = ("m", li, r.index) if li is not None else ("x", ext[r.node, r.index], 0)
            refs.append((ref, types_of[v.node][v.index], per[v.node][v.index]))
        entries.append((n.op, n.attrs, types_of[m], per[m], tuple(refs)))
    ext_desc = tuple((types_of[v.node][v.index], per[v.node][v.index]) for v in kernel.inputs)
    outs = tuple((local[v.node], v.index) for v in kernel.outputs)
    return Signature((tuple(entries), ext_desc, outs))
