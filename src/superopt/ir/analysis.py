"""Static graph statistics: parameters, multiply-accumulates, FLOPs and bytes.

FLOPs count 2 per multiply-accumulate plus one per element of element-wise, pooling and
normalisation work; published model sizes usually quote multiply-accumulates ("MACs"),
which `GraphStats.macs` reports separately.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from superopt.ir.graph import Graph, Node
from superopt.ir.opdef import ELEMENTWISE, MOVEMENT, SOURCE, TRANSCENDENTAL, get_op, ops_with
from superopt.ir.rules import RuleTable
from superopt.ir.types import TensorType

# (node, input types) -> (multiply-accumulates, other flops)
CostRule = Callable[[Node, tuple[TensorType, ...]], tuple[int, int]]
COUNTS: RuleTable[CostRule] = RuleTable("flops")


def _matmul(n: Node, ts: tuple[TensorType, ...]) -> tuple[int, int]:
    return n.type.size * ts[0].shape[-1], n.type.size if n.attr("activation") != "none" else 0


def _linear(n: Node, ts: tuple[TensorType, ...]) -> tuple[int, int]:
    act = n.type.size if n.attr("activation") != "none" else 0
    return n.type.size * ts[0].shape[-1], n.type.size + act  # the bias add, then act


def _conv(n: Node, ts: tuple[TensorType, ...]) -> tuple[int, int]:
    w = ts[1].shape
    act = n.type.size if n.attr("activation") != "none" else 0
    return n.type.size * w[1] * w[2] * w[3], act


def _per_output(factor: int) -> CostRule:
    return lambda n, ts: (0, factor * sum(t.size for t in n.types))


def _pool(n: Node, ts: tuple[TensorType, ...]) -> tuple[int, int]:
    k = n.attr("kernel")
    return 0, n.type.size * k[0] * k[1]


def _per_input(factor: int) -> CostRule:
    return lambda n, ts: (0, factor * ts[0].size)


COUNTS.register("matmul", _matmul)
COUNTS.register("linear", _linear)
COUNTS.register("conv2d", _conv)
for _name in ("ewadd", "ewmul", "smul", "relu"):
    COUNTS.register(_name, _per_output(1))
for _name in ("sigmoid", "tanh"):
    COUNTS.register(_name, _per_output(4))
COUNTS.register("gelu", _per_output(8))
COUNTS.register("pool2d_avg", _pool)
COUNTS.register("pool2d_max", _pool)
COUNTS.register("reduce_sum", _per_input(1))
COUNTS.register("reduce_mean", _per_input(1))
COUNTS.register("softmax", _per_input(5))
COUNTS.register("layer_norm", _per_input(8))
COUNTS.register("batch_norm", _per_input(2))
COUNTS.register("lrn", lambda n, ts: (0, ts[0].size * (n.attr("size") + 4)))
for _name in ops_with(SOURCE):
    COUNTS.register(_name, lambda n, ts: (0, 0))
# Data movement only: no arithmetic (an embedding or a gather moves rows).
for _name in (*ops_with(MOVEMENT), "embedding", "gather"):
    COUNTS.register(_name, lambda n, ts: (0, 0))
COUNTS.register("reduce_max", _per_input(1))
COUNTS.register("argmax", _per_input(1))  # one compare per element
# A selection of k: about log2(k) + 1 compares per element (a heap of k).
COUNTS.register("topk", lambda n, ts: (0, ts[0].size * (int(n.attr("k")).bit_length() + 1)))
COUNTS.register("rms_norm", _per_input(4))


def _attention(n: Node, ts: tuple[TensorType, ...]) -> tuple[int, int]:
    q, k, v = ts
    scores = math.prod(q.shape[:-1]) * k.shape[-2]  # every (query, key) pair of every head
    return scores * (q.shape[-1] + v.shape[-1]), 5 * scores  # two matmuls, then softmax


COUNTS.register("attention", _attention)
# Every other element-wise op from its traits: a transcendental counts like sigmoid (a
# polynomial or an EUP op and a fix-up), anything else (arithmetic, comparisons, selects,
# casts) one operation per output element. A new element-wise op needs no row here.
for _name in ops_with(ELEMENTWISE):
    if _name not in COUNTS:
        COUNTS.register(_name, _per_output(4 if get_op(_name).has(TRANSCENDENTAL) else 1))


@dataclass(frozen=True)
class GraphStats:
    nodes: int
    ops: Counter[str]
    params: int  # elements of weight tensors
    param_bytes: int
    macs: int
    flops: int
    activation_bytes: int  # bytes of every non-source value, each written once
    input_bytes: int
    output_bytes: int


def stats(graph: Graph) -> GraphStats:
    params = param_bytes = macs = other = act = 0
    for n in graph.nodes:
        ts = tuple(graph.type_of(v) for v in n.inputs)
        m, f = COUNTS.get(n.op)(n, ts)
        macs += m
        other += f
        if n.op == "weight":
            params += n.type.size
            param_bytes += n.type.nbytes
        elif not get_op(n.op).has(SOURCE) and not (get_op(n.op).has(MOVEMENT) and n.op == "reshape"):
            act += sum(t.nbytes for t in n.types)
    return GraphStats(
        nodes=len(graph), ops=graph.op_histogram(), params=params, param_bytes=param_bytes,
        macs=macs, flops=2 * macs + other, activation_bytes=act,
        input_bytes=sum(n.type.nbytes for n in graph.inputs),
        output_bytes=sum(graph.type_of(v).nbytes for v in graph.outputs))


def human(x: float, unit: str = "") -> str:
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{suffix}{unit}"
    return f"{x:.0f}{unit}" if float(x).is_integer() else f"{x:.3g}{unit}"


def human_bytes(n: float) -> str:
    for suffix, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {suffix}"
    return f"{math.floor(n)} B"
