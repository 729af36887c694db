"""Integer value ranges of graph values: an interval analysis over the IR.

Importers read some integer ops exactly only where they know the values' range: a
truncated division of routed expert ids becomes a lookup table (LongCat-Flash), a
bitwise and of 0/1 masks a product (CPM-Ant), a histogram of ids a one-hot sum. The
analysis is the same whichever importer built the nodes, so it works on IR nodes (a
`GraphBuilder` under construction or a finished `Graph`): `ValueRanges(g).span(v)` is
`[lo, hi]` holding every element of the integer tensor `v`, or None where unknown.

Each op's rule lives in `RANGES` beside the others (the coverage test checks every op has
one or says why not). A rule sees the node and the analysis, and asks for the spans of
only the operands it needs; ops whose results are never integers are marked unsupported.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from superopt.ir.graph import Node, Value
from superopt.ir.opdef import MOVEMENT, TRANSCENDENTAL, ops_with
from superopt.ir.rules import RuleTable
from superopt.ir.types import DType, TensorType

Span = tuple[int, int]
# The widest span an importer makes a lookup table for (a division, a histogram's bins).
LOOKUP_LIMIT = 1 << 16


class NodeSource(Protocol):
    """What the analysis reads: a GraphBuilder or a Graph."""

    @property
    def nodes(self) -> Sequence[Node]: ...

    @property
    def weights(self) -> Mapping[str, np.ndarray]: ...

    def type_of(self, v: Value) -> TensorType: ...


class ValueRanges:
    """Spans of integer values in one graph, each worked out once (the graph's nodes never
    change once made, so the memo stays valid while a builder grows)."""

    def __init__(self, graph: NodeSource) -> None:
        self.graph = graph
        self._memo: dict[Value, Span | None] = {}

    def span(self, v: Value) -> Span | None:
        if v in self._memo:
            return self._memo[v]
        node = self.graph.nodes[v.node]
        out: Span | None = None
        if not node.types[v.index].dtype.is_float and RANGES.supports(node.op):
            out = RANGES.get(node.op)(self, node, v.index)
        self._memo[v] = out
        return out

    def spans(self, vs: Sequence[Value]) -> list[Span] | None:
        """Every operand's span, or None if any is unknown."""
        out = []
        for v in vs:
            s = self.span(v)
            if s is None:
                return None
            out.append(s)
        return out

    def type_of(self, v: Value) -> TensorType:
        return self.graph.type_of(v)

    def index_bound(self, v: Value) -> int | None:
        """n where every element is known to lie in [0, n) (an index into an axis of
        length n needs no wrapping); None where unknown."""
        s = self.span(v)
        return s[1] + 1 if s is not None and s[0] >= 0 else None


# (analysis, node, output index) -> span of that output, or None where unknown.
RangeRule = Callable[[ValueRanges, Node, int], "Span | None"]
RANGES: RuleTable[RangeRule] = RuleTable("int_ranges")


def _same(an: ValueRanges, node: Node, index: int) -> Span | None:
    """Ops whose results are some of their (first) operand's values."""
    return an.span(node.inputs[0])


def _union(spans: Sequence[Span] | None) -> Span | None:
    if not spans:
        return None
    return min(s[0] for s in spans), max(s[1] for s in spans)


def _bool(an: ValueRanges, node: Node, index: int) -> Span | None:
    return 0, 1


def _weight(an: ValueRanges, node: Node, index: int) -> Span | None:
    data = an.graph.weights.get(node.attr("name"))
    if data is None or data.dtype.kind not in "iub" or not data.size:
        return None  # no data (a random weight at run time) or floats
    return int(data.min()), int(data.max())


def _iota(an: ValueRanges, node: Node, index: int) -> Span | None:
    return 0, max(node.type.shape[node.attr("axis")], 1) - 1


def _position(an: ValueRanges, node: Node, index: int) -> Span | None:
    """Indices along a reduced axis (argmax; a topk's second output)."""
    axis = node.attr("axis") if node.op == "topk" else node.attr("axes")[0]
    n = an.type_of(node.inputs[0]).shape[axis]
    return 0, max(n, 1) - 1


def _topk(an: ValueRanges, node: Node, index: int) -> Span | None:
    return _position(an, node, index) if index == 1 else an.span(node.inputs[0])


def _add(an: ValueRanges, node: Node, index: int) -> Span | None:
    s = an.spans(node.inputs)
    return None if s is None else (s[0][0] + s[1][0], s[0][1] + s[1][1])


def _sub(an: ValueRanges, node: Node, index: int) -> Span | None:
    s = an.spans(node.inputs)
    return None if s is None else (s[0][0] - s[1][1], s[0][1] - s[1][0])


def _mul(an: ValueRanges, node: Node, index: int) -> Span | None:
    s = an.spans(node.inputs)
    if s is None:
        return None
    corners = [p * q for p in s[0] for q in s[1]]
    return min(corners), max(corners)


def _extreme(an: ValueRanges, node: Node, index: int) -> Span | None:
    s = an.spans(node.inputs)
    if s is None:
        return None
    pick = max if node.op == "maximum" else min
    return pick(s[0][0], s[1][0]), pick(s[0][1], s[1][1])


def _cast(an: ValueRanges, node: Node, index: int) -> Span | None:
    source, to = an.type_of(node.inputs[0]).dtype, node.type.dtype
    if DType.BOOL in (source, to):
        return 0, 1
    if source.is_float:
        return None  # truncated floats: not a subset of known values
    s = an.span(node.inputs[0])
    if s is None:
        return None
    bits = 8 * to.numpy.itemsize
    fits = -(1 << (bits - 1)) <= s[0] and s[1] < (1 << (bits - 1))
    return s if fits else None  # a narrowing cast that could wrap


def _concat(an: ValueRanges, node: Node, index: int) -> Span | None:
    return _union(an.spans(node.inputs))


def _where(an: ValueRanges, node: Node, index: int) -> Span | None:
    return _union(an.spans(node.inputs[1:]))  # either branch


def _with_zero(an: ValueRanges, node: Node, index: int) -> Span | None:
    """Movement ops that also write zeros (a pad, an enlarged kernel)."""
    s = an.span(node.inputs[0])
    return None if s is None else (min(s[0], 0), max(s[1], 0))


def _reduce_sum(an: ValueRanges, node: Node, index: int) -> Span | None:
    s = an.span(node.inputs[0])
    if s is None:
        return None
    shape = an.type_of(node.inputs[0]).shape
    n = math.prod(shape[a] for a in node.attr("axes")) if node.attr("axes") else \
        math.prod(shape)
    return n * s[0], n * s[1]  # n terms in [lo, hi]; an empty sum is 0


def _register() -> None:
    for op in ops_with(MOVEMENT):
        if op not in ("concat", "pad", "enlarge"):
            RANGES.register(op, _same)  # reshape, transpose, slice, expand, split, copy, ...
    for op, rule in (("concat", _concat), ("pad", _with_zero), ("enlarge", _with_zero),
                     ("weight", _weight), ("iota", _iota), ("tri_mask", _bool),
                     ("eq", _bool), ("gt", _bool), ("lt", _bool),
                     ("argmax", _position), ("topk", _topk), ("gather", _same),
                     ("reduce_max", _same), ("ewadd", _add), ("sub", _sub), ("ewmul", _mul),
                     ("smul", _mul), ("maximum", _extreme),
                     ("minimum", _extreme), ("cast", _cast),
                     ("where", _where), ("reduce_sum", _reduce_sum)):
        RANGES.register(op, rule)
    for op in ops_with(TRANSCENDENTAL):
        RANGES.unsupported(op, "results are floats")
    float_only = {
        "input": "a graph input's values are the caller's",
        "const_one": "float constants", "const_imm": "float constants",
        "const_iconv": "float constants", "const_pool": "float constants",
        "matmul": "float products", "linear": "float products", "conv2d": "float products",
        "attention": "float products", "embedding": "float rows",
        "pool2d_avg": "averages", "pool2d_max": "float windows", "lrn": "a float norm",
        "batch_norm": "a float norm", "layer_norm": "a float norm", "rms_norm": "a float norm",
        "softmax": "probabilities", "reduce_mean": "averages",
        "neg": "the IR's neg takes floats only", "relu": "the IR's relu takes floats only",
    }
    for op, why in float_only.items():
        RANGES.unsupported(op, why)


_register()
