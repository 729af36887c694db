"""Batch chunking: run a graph's batch in `k` chunks, one copy of the per-sample work each.

A model at batch 16 computes sixteen independent samples, and a runtime runs each op on
all of them at once: a transformer's FFN product at 2,048 rows, its GELU over a
2,048 x 3,072 intermediate. On a CPU such operands outgrow the caches between one op and
the next; the same work in four chunks of four samples keeps them resident (onnxruntime,
one thread: BERT-base and GPT-2 at batch 16 ran 1.07-1.08x faster in chunks of 4). It is
a whole-graph choice, so it is a pass (`split_batch`) rather than a local rule.

Axis 0 of every graph input whose leading dimension is the batch (that of the first
input) is split into `k` equal chunks; each op then runs once per chunk when its rule in
`CHUNK_RULES` (a per-op table, the JAX batching-rule pattern) says that chunk `i` of its
output's axis 0 depends only on chunk `i` of its chunked inputs, and gives the
attributes of the op at the chunk's size (a reshape's target shape, a slice's end).
Weights and other values that do not depend on a chunked input are shared by every
chunk. An op whose rule refuses (a reduction over axis 0, a transpose that moves it, a
reshape that mixes samples) runs once on the chunks concatenated back, and so does
everything after it: the chunks never cross a point where the samples mix.

Every rule is checked against the ops' reference semantics over the shared op-case table
(tests/rewrite/test_batchsplit.py): where a rule accepts, the chunks' outputs
concatenated equal the op's output on the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.opdef import ELEMENTWISE, ops_with
from superopt.ir.passes import Origin, copy_node
from superopt.ir.rules import RuleTable
from superopt.ir.types import TensorType

# A rule gets the node's attributes, its input types (at the whole batch), which inputs
# are chunked (their axis 0 split in `k` equal parts) and `k`; it returns the node's
# attributes at the chunk size, or None where chunk i of the output's axis 0 would read
# more than chunk i of the chunked inputs.
Attrs = dict[str, Any]
ChunkRule = Callable[[Attrs, tuple[TensorType, ...], tuple[bool, ...], int], Attrs | None]

CHUNK_RULES: RuleTable[ChunkRule] = RuleTable("batch_chunk")

# The chunk counts offered where they divide the batch, in the order a search measures
# them: onnxruntime, one thread, the zoo's batch-16 rows as whole-graph copies per chunk
# (8 paired rounds each): 4 chunks 1.06-1.12x on BERT-small/base, GPT-2, ViT-B/16 and
# T5-small, 8 within 0.01-0.06 of that, 2 behind both (1.03-1.07x).
CHUNK_OPTIONS = (4, 8, 2)
# Offered only where at least this share of the graph's ops runs per chunk: a split whose
# chunks are merged again at the first ops gains nothing and pays the copies.
MIN_CHUNKED_SHARE = 0.5


def _out_rank(types: tuple[TensorType, ...]) -> int:
    return max(t.rank for t in types)


def _shared_ok(t: TensorType, rank: int) -> bool:
    """A shared (unchunked) operand broadcast against a chunked one must not span axis 0
    of the result: it has a lower rank (numpy aligns the trailing axes) or size 1 there."""
    return t.rank < rank or (t.rank > 0 and t.shape[0] == 1)


def _broadcasting(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
                  k: int) -> Attrs | None:
    """Element-wise ops (numpy broadcasting): chunked operands carry the result's axis 0,
    shared ones are broadcast along it."""
    rank = _out_rank(types)
    if rank == 0:
        return None
    for t, c in zip(types, chunked, strict=True):
        if c and t.rank != rank:
            return None
        if not c and not _shared_ok(t, rank):
            return None
    return attrs


def _first_only(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
                k: int) -> Attrs | None:
    """Ops over samples whose other operands are parameters (a convolution's filters, a
    layer's weights, a norm's scale): only the first operand may be chunked."""
    if not chunked[0] or any(chunked[1:]) or types[0].rank < 1:
        return None
    return attrs


def _axis_not(axis_key: str) -> ChunkRule:
    """Single-operand ops along one axis (softmax, norms, split, top-k): any axis but 0."""
    def rule(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
             k: int) -> Attrs | None:
        if _first_only(attrs, types, chunked, k) is None:
            return None
        rank = types[0].rank
        return attrs if attrs[axis_key] % rank != 0 else None
    return rule


def _axes_not_0(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
                k: int) -> Attrs | None:
    """Reductions: axis 0 is not reduced (an empty `axes` reduces every axis)."""
    if _first_only(attrs, types, chunked, k) is None:
        return None
    rank = types[0].rank
    axes = attrs["axes"] or tuple(range(rank))
    return attrs if all(a % rank != 0 for a in axes) else None


def _matmul(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
            k: int) -> Attrs | None:
    a, b = types
    rank = max(a.rank, b.rank)
    if rank == 2:
        # Axis 0 is a's rows: chunks of rows times the whole right operand.
        return attrs if chunked == (True, False) else None
    # Axis 0 is a batch axis: chunked operands carry it, shared ones broadcast over it.
    return _broadcasting(attrs, types, chunked, k)


def _attention(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
               k: int) -> Attrs | None:
    # q, k, v are (..., heads, length, head_dim): axis 0 must be a batch axis.
    if _out_rank(types) < 4:
        return None
    return _broadcasting(attrs, types, chunked, k)


def _concat(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
            k: int) -> Attrs | None:
    # Every operand has the whole axis 0, so a shared one could not join a chunk.
    return attrs if all(chunked) and attrs["axis"] != 0 else None


def _transpose(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
               k: int) -> Attrs | None:
    return attrs if chunked[0] and attrs["perm"][0] == 0 else None


def _reshape(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
             k: int) -> Attrs | None:
    # Row-major: chunk i of axis 0 is the i-th k-th of the elements, in the input as in the
    # output, whenever both leading dimensions divide by k.
    shape = tuple(attrs["shape"])
    if not chunked[0] or not shape or shape[0] % k or types[0].shape[0] % k:
        return None
    return {**attrs, "shape": (shape[0] // k, *shape[1:])}


def _slice(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
           k: int) -> Attrs | None:
    n = types[0].shape[0]
    starts, ends, steps = attrs["starts"], attrs["ends"], attrs["steps"]
    if not chunked[0] or (starts[0], ends[0], steps[0]) != (0, n, 1):
        return None
    return {**attrs, "ends": (n // k, *ends[1:])}


def _pad(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
         k: int) -> Attrs | None:
    pads, rank = attrs["pads"], types[0].rank
    return attrs if chunked[0] and pads[0] == 0 and pads[rank] == 0 else None


def _expand(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
            k: int) -> Attrs | None:
    (x,) = types
    shape = tuple(attrs["shape"])
    if not chunked[0] or x.rank != len(shape) or x.shape[0] != shape[0]:
        return None
    return {**attrs, "shape": (shape[0] // k, *shape[1:])}


def _gather(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
            k: int) -> Attrs | None:
    x, idx = types
    axis = attrs["axis"] % x.rank
    if chunked == (True, False) and axis != 0:
        return attrs  # rows of samples, the same indices in each
    if chunked == (False, True) and axis == 0 and idx.rank >= 1:
        return attrs  # a table looked up by each chunk's indices
    return None


def _embedding(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
               k: int) -> Attrs | None:
    return attrs if chunked == (True, False) and types[0].rank >= 1 else None


def _same(attrs: Attrs, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
          k: int) -> Attrs | None:
    """Value-preserving single-operand ops (a copy, a layout change, a filter's spatial
    padding that leaves axis 0 alone)."""
    return attrs if chunked[0] and types[0].rank >= 1 else None


for _op in ops_with(ELEMENTWISE):
    CHUNK_RULES.register(_op, _broadcasting)
CHUNK_RULES.register("matmul", _matmul)
CHUNK_RULES.register("attention", _attention)
for _op in ("linear", "conv2d", "batch_norm", "pool2d_avg", "pool2d_max", "lrn"):
    CHUNK_RULES.register(_op, _first_only)
for _op in ("layer_norm", "rms_norm", "softmax", "split", "topk"):
    CHUNK_RULES.register(_op, _axis_not("axis"))
for _op in ("reduce_sum", "reduce_mean", "reduce_max", "argmax"):
    CHUNK_RULES.register(_op, _axes_not_0)
CHUNK_RULES.register("concat", _concat)
CHUNK_RULES.register("transpose", _transpose)
CHUNK_RULES.register("reshape", _reshape)
CHUNK_RULES.register("slice", _slice)
CHUNK_RULES.register("pad", _pad)
CHUNK_RULES.register("expand", _expand)
CHUNK_RULES.register("gather", _gather)
CHUNK_RULES.register("embedding", _embedding)
for _op in ("copy", "layout", "enlarge"):
    CHUNK_RULES.register(_op, _same)
for _op in ("input", "weight", "const_iconv", "const_imm", "const_one", "const_pool", "iota",
            "tri_mask"):
    CHUNK_RULES.unsupported(_op, "a source: the pass splits graph inputs itself and shares "
                                 "weights and constants")


def batch_of(graph: Graph) -> int | None:
    """The batch: the leading dimension of the graph's first input (None without one)."""
    for node in graph.nodes:
        if node.op == "input" and node.type.rank >= 1:
            return node.type.shape[0]
    return None


@dataclass(frozen=True)
class ChunkResult:
    graph: Graph
    origin: Origin
    k: int
    chunked_ops: int  # ops of the input graph run once per chunk
    whole_ops: int  # ops that depend on the batch but run on it whole (after a merge)
    shared_ops: int  # ops on weights and constants only, computed once

    @property
    def share(self) -> float:
        """The share of the batch-dependent ops that run per chunk."""
        n = self.chunked_ops + self.whole_ops
        return self.chunked_ops / n if n else 0.0


def _chunked_inputs(graph: Graph, k: int) -> set[int]:
    batch = batch_of(graph)
    if batch is None or k < 2 or batch % k:
        return set()
    return {n.id for n in graph.nodes
            if n.op == "input" and n.type.rank >= 1 and n.type.shape[0] == batch}


def _rule(node: Node, types: tuple[TensorType, ...], chunked: tuple[bool, ...],
          k: int) -> Attrs | None:
    if not CHUNK_RULES.supports(node.op):
        return None
    return CHUNK_RULES.get(node.op)(dict(node.attrs), types, chunked, k)


def plan_chunks(graph: Graph, k: int
                ) -> tuple[dict[int, tuple[Attrs, tuple[bool, ...]]], set[int]]:
    """Which ops run per chunk (their chunk attributes, and which operands they read in
    chunks) and which depend on the batch but run whole, without building anything (the
    site's offer is decided from it).

    An op whose rule refuses a shared operand that spans the batch (a class token expanded
    to the batch, then concatenated with the samples' patches) reads that operand in
    chunks too, sliced from it along axis 0, when its rule accepts that."""
    chunked: dict[int, tuple[Attrs, tuple[bool, ...]]] = {}
    whole: set[int] = set()
    split = _chunked_inputs(graph, k)
    for node in graph.nodes:
        if node.is_source:
            continue
        ins = tuple(v.node in split or v.node in chunked for v in node.inputs)
        if any(v.node in whole for v in node.inputs):
            whole.add(node.id)
            continue
        if not any(ins):
            continue  # weights and constants only: shared
        types = tuple(graph.type_of(v) for v in node.inputs)
        attrs = _rule(node, types, ins, k)
        if attrs is None:
            lead = {t.shape[0] for t, c in zip(types, ins, strict=True) if c and t.rank}
            rank = _out_rank(types)
            wider = tuple(c or (t.rank == rank and t.shape[0] in lead and t.shape[0] % k == 0)
                          for t, c in zip(types, ins, strict=True))
            if wider != ins:
                attrs = _rule(node, types, wider, k)
                ins = wider
        if attrs is None:
            whole.add(node.id)
        else:
            chunked[node.id] = (attrs, ins)
    return chunked, whole


def split_batch(graph: Graph, k: int) -> ChunkResult:
    """`graph` with its batch run in `k` chunks (module docstring); `k` must divide the
    batch. The result computes the same values: chunk outputs are concatenated back."""
    batch = batch_of(graph)
    if batch is None or k < 2 or batch % k:
        raise ValueError(f"{graph.name}: cannot split batch {batch} into {k} chunks")
    split = _chunked_inputs(graph, k)
    chunked, whole = plan_chunks(graph, k)
    b = GraphBuilder(graph.name)
    full: dict[Value, Value] = {}  # a value at the whole batch in the new graph
    parts: dict[Value, tuple[Value, ...]] = {}  # a chunked value's k chunks
    origin: dict[int, set[int]] = {}

    def whole_value(v: Value) -> Value:
        got = full.get(v)
        if got is None:  # the chunks of a value an op needs whole: concatenated once
            got = full[v] = b.op("concat", *parts[v], axis=0)  # type: ignore[assignment]
        return got

    for node in graph.nodes:
        start = len(b.nodes)
        if node.id in chunked:
            attrs, mask = chunked[node.id]
            for v, c in zip(node.inputs, mask, strict=True):
                if c and v not in parts:  # a shared operand read in chunks
                    n = graph.type_of(v).shape[0]
                    parts[v] = b.add("split", [full[v]], {"axis": 0, "sizes": (n // k,) * k})
            per: list[tuple[Value, ...]] = []
            for i in range(k):
                ins = [parts[v][i] if c else whole_value(v)
                       for v, c in zip(node.inputs, mask, strict=True)]
                per.append(b.add(node.op, ins, attrs))
            for j in range(len(node.types)):
                parts[Value(node.id, j)] = tuple(p[j] for p in per)
        else:
            ins = tuple(whole_value(v) for v in node.inputs)
            new = copy_node(b, node, ins, graph)
            for j, v in enumerate(new):
                full[Value(node.id, j)] = v
            if node.id in split:
                size = node.type.shape[0] // k
                parts[Value(node.id)] = b.add("split", [new[0]],
                                              {"axis": 0, "sizes": (size,) * k})
        for nid in range(start, len(b.nodes)):
            origin.setdefault(nid, set()).add(node.id)
    outs = []
    for v in graph.outputs:  # chunked outputs concatenated: descended from their producer
        start = len(b.nodes)
        outs.append(whole_value(v))
        for nid in range(start, len(b.nodes)):
            origin.setdefault(nid, set()).add(v.node)
    out, remap = b.build_with_map(outs, graph.name)
    final = MappingProxyType({remap[n]: tuple(sorted(o)) for n, o in origin.items()
                              if n in remap})
    shared = sum(1 for n in graph.nodes if not n.is_source) - len(chunked) - len(whole)
    return ChunkResult(out, final, k, len(chunked), len(whole), shared)


def chunk_options(graph: Graph) -> tuple[int, ...]:
    """The chunk counts worth offering on `graph`: those dividing its batch under which
    at least `MIN_CHUNKED_SHARE` of the batch-dependent ops run per chunk."""
    batch = batch_of(graph)
    if batch is None or batch < 2:
        return ()
    out = []
    for k in CHUNK_OPTIONS:
        if batch % k:
            continue
        chunked, whole = plan_chunks(graph, k)
        if chunked and len(chunked) >= MIN_CHUNKED_SHARE * (len(chunked) + len(whole)):
            out.append(k)
    return tuple(out)


def describe(result: ChunkResult) -> str:
    """One line for reports: the chunk count and where the ops ran."""
    return (f"batch in {result.k} chunks: {result.chunked_ops} ops per chunk, "
            f"{result.whole_ops} on the whole batch")


__all__ = ["CHUNK_OPTIONS", "CHUNK_RULES", "ChunkResult", "batch_of", "chunk_options",
           "describe", "plan_chunks", "split_batch"]
