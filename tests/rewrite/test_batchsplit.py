"""Batch chunking (`superopt.rewrite.batchsplit`): every chunk rule is checked against the
ops' reference semantics over the shared op-case table, and whole graphs split in chunks
compute what they computed before."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from op_cases import OP_CASES
from superopt.ir import Graph, GraphBuilder, get_op, interpret, random_feeds
from superopt.ir.graph import Node
from superopt.ir.types import TensorType
from superopt.rewrite.batchsplit import (
    CHUNK_RULES,
    ChunkRule,
    batch_of,
    chunk_options,
    plan_chunks,
    split_batch,
)

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CHUNKABLE = [op for op in sorted(OP_CASES) if CHUNK_RULES.supports(op)]


def chunks_agree(node: Node, types: tuple[TensorType, ...], values: list[np.ndarray],
                 full: tuple[np.ndarray, ...], mask: tuple[bool, ...], k: int,
                 rule: ChunkRule) -> bool | None:
    """None where `rule` refuses `node` (operand types `types`) with operands `mask`
    chunked in `k`; else whether the op run per chunk (at the rule's attributes, checked
    and shaped as a builder does) and concatenated equals its output `full` on the whole
    batch."""
    opdef = get_op(node.op)
    attrs = rule(dict(node.attrs), types, mask, k)
    if attrs is None:
        return None
    outs: list[list[np.ndarray]] = [[] for _ in full]
    for i in range(k):
        ins = tuple(np.split(v, k, axis=0)[i] if c else v
                    for v, c in zip(values, mask, strict=True))
        in_types = tuple(TensorType(tuple(x.shape), t.dtype)
                         for x, t in zip(ins, types, strict=True))
        checked = opdef.check_attrs(attrs)
        if opdef.canonicalize is not None:
            checked = opdef.canonicalize(in_types, dict(checked))
        shaped = opdef.shape(in_types, checked)
        got = opdef.reference(ins, checked)
        for j, (t, y) in enumerate(zip(shaped, got, strict=True)):
            assert tuple(np.shape(y)) == t.shape
            outs[j].append(np.asarray(y))
    joined = [np.concatenate(o, axis=0) for o in outs]
    return all(j.shape == f.shape and np.allclose(j, f, rtol=1e-9, atol=1e-12, equal_nan=True)
               for j, f in zip(joined, full, strict=True))


def _node_values(graph: Graph, op: str
                 ) -> tuple[Node, tuple[TensorType, ...], list[np.ndarray], tuple[Any, ...]]:
    """The case's node of `op`, its operands' types and values and its outputs (a
    reference run)."""
    node = next(n for n in graph.nodes if n.op == op)
    feeds = random_feeds(graph, seed=1, include_weights=True)
    kept = interpret(graph, feeds, keep=True)
    assert isinstance(kept, dict)
    return (node, tuple(graph.type_of(v) for v in node.inputs),
            [np.asarray(kept[v]) for v in node.inputs],
            tuple(np.asarray(kept[o]) for o in node.outputs))


def _masks(values: list[np.ndarray], k: int) -> list[tuple[bool, ...]]:
    """Every non-empty set of operands that can be cut in `k` along axis 0."""
    able = [v.ndim >= 1 and v.shape[0] % k == 0 for v in values]
    out = []
    for mask in itertools.product((False, True), repeat=len(values)):
        if any(mask) and all(a or not m for a, m in zip(able, mask, strict=True)):
            out.append(mask)
    return out


@pytest.mark.parametrize("op", CHUNKABLE)
def test_every_chunk_rule_agrees_with_the_reference_semantics(op: str) -> None:
    rule = CHUNK_RULES.get(op)

    @SETTINGS
    @given(OP_CASES[op]())
    def check(graph: Graph) -> None:
        node, types, values, full = _node_values(graph, op)
        for k in (2, 3):
            for mask in _masks(values, k):
                assert chunks_agree(node, types, values, full, mask, k, rule) in (None, True), \
                    (op, dict(node.attrs), [v.shape for v in values], mask, k)

    check()


def test_the_check_catches_a_rule_that_accepts_too_much() -> None:
    """A transpose rule that ignores where axis 0 goes is refuted by the same check."""
    b = GraphBuilder("t")
    x = b.input("x", (4, 6))
    g = b.build(b.transpose(x, perm=(1, 0)))
    node, types, values, full = _node_values(g, "transpose")
    assert chunks_agree(node, types, values, full, (True,), 2,
                        CHUNK_RULES.get("transpose")) is None

    def careless(attrs: dict, types: Any, mask: Any, k: int) -> dict:
        return attrs

    assert chunks_agree(node, types, values, full, (True,), 2, careless) is False


def _patch_classifier(batch: int) -> Graph:
    """A small ViT-shaped graph: patches by a strided conv, a class token expanded to the
    batch and concatenated, attention over the tokens, the class token's row read."""
    b = GraphBuilder("tiny_vit")
    x = b.input("image", (batch, 3, 8, 8))
    p = b.conv2d(x, b.weight("patch", (16, 3, 4, 4)), stride=(4, 4))
    t = b.transpose(b.reshape(p, shape=(batch, 16, 4)), perm=(0, 2, 1))
    cls = b.expand(b.weight("cls", (1, 1, 16)), shape=(batch, 1, 16))
    h = b.layer_norm(b.concat(cls, t, axis=1), b.weight("g", (16,)), b.weight("bb", (16,)),
                     axis=-1)
    q = b.reshape(b.matmul(h, b.weight("wq", (16, 16))), shape=(batch, 5, 2, 8))
    q = b.transpose(q, perm=(0, 2, 1, 3))
    a = b.attention(q, q, q)
    y = b.reshape(b.transpose(a, perm=(0, 2, 1, 3)), shape=(batch, 5, 16))
    row = b.slice(y, starts=(0, 0, 0), ends=(batch, 1, 16), steps=(1, 1, 1))
    return b.build(b.softmax(b.reshape(row, shape=(batch, 16)), axis=-1))


@pytest.mark.parametrize("k", [2, 4])
def test_a_split_graph_computes_what_the_graph_computed(k: int) -> None:
    g = _patch_classifier(4)
    r = split_batch(g, k)
    assert r.whole_ops == 0 and r.chunked_ops > 10
    ops = [n.op for n in r.graph.nodes]
    assert ops.count("split") == 2  # the image, and the class token read in chunks
    assert ops.count("attention") == k and ops.count("concat") == k + 1
    feeds = random_feeds(g, seed=3)
    np.testing.assert_allclose(interpret(r.graph, feeds)[0], interpret(g, feeds)[0],
                               rtol=1e-12)
    # every new node descends from a node of the input graph
    assert set(r.origin) == set(range(len(r.graph)))


def test_chunks_merge_where_the_samples_mix() -> None:
    """A reduction over the batch runs whole, and everything after it."""
    b = GraphBuilder("mix")
    x = b.input("x", (6, 5))
    h = b.relu(b.matmul(x, b.weight("w", (5, 5))))
    m = b.reduce_mean(h, axes=(0,), keepdims=True)  # over the samples: mixes them
    g = b.build([b.ewadd(h, m), b.sigmoid(h)])
    chunked, whole = plan_chunks(g, 2)
    ops = {g.nodes[i].op for i in chunked}
    assert ops == {"matmul", "relu", "sigmoid"}
    assert {g.nodes[i].op for i in whole} == {"reduce_mean", "ewadd"}
    r = split_batch(g, 2)
    feeds = random_feeds(g, seed=0)
    for a, c in zip(interpret(r.graph, feeds), interpret(g, feeds), strict=True):
        np.testing.assert_allclose(a, c, rtol=1e-12)


def test_options_divide_the_batch_and_need_most_ops_per_chunk() -> None:
    assert chunk_options(_patch_classifier(8)) == (4, 8, 2)
    assert chunk_options(_patch_classifier(6)) == (2,)
    assert chunk_options(_patch_classifier(1)) == ()
    # the samples mixed at the first op: nothing would run per chunk
    b = GraphBuilder("early")
    x = b.input("x", (8, 4))
    y = b.transpose(x, perm=(1, 0))
    g = b.build(b.tanh(b.matmul(y, b.weight("w", (8, 8)))))
    assert batch_of(g) == 8 and chunk_options(g) == ()
    with pytest.raises(ValueError, match="cannot split batch 8 into 3"):
        split_batch(g, 3)


@pytest.mark.parametrize("model", ["bert_small", "resnet18", "t5_small_encoder"])
def test_zoo_models_split_in_chunks_keep_their_values(model: str) -> None:
    from superopt import zoo

    g = zoo.build(model, batch=2)
    assert chunk_options(g) == (2,)
    r = split_batch(g, 2)
    assert r.whole_ops == 0  # these run per sample throughout
    feeds = random_feeds(g, seed=0)
    for a, c in zip(interpret(r.graph, feeds), interpret(g, feeds), strict=True):
        np.testing.assert_allclose(a, c, rtol=1e-9, atol=1e-9)


def _one(op: str, dims: tuple[int, ...], **attrs: Any) -> Graph:
    b = GraphBuilder(op)
    return b.build(b.op(op, b.input("x", dims), **attrs))


@pytest.mark.parametrize("graph, op, accepted", [
    (_one("reduce_sum", (4, 3, 2), axes=(1, 2)), "reduce_sum", True),
    (_one("reduce_sum", (4, 3, 2), axes=(0,)), "reduce_sum", False),
    (_one("reduce_sum", (4, 3), axes=()), "reduce_sum", False),  # every axis
    (_one("reduce_max", (4, 3), axes=(-1,), keepdims=False), "reduce_max", True),
    (_one("slice", (4, 6), starts=(0, 1), ends=(4, 5), steps=(1, 2)), "slice", True),
    (_one("slice", (4, 6), starts=(1, 0), ends=(4, 6), steps=(1, 1)), "slice", False),
    (_one("expand", (4, 1, 3), shape=(4, 5, 3)), "expand", True),
    (_one("expand", (4, 3), shape=(2, 4, 3)), "expand", False),  # a new leading axis
    (_one("reshape", (4, 6), shape=(8, 3)), "reshape", True),
    (_one("reshape", (4, 6), shape=(6, 4)), "reshape", True),  # halves of the elements
    (_one("reshape", (4, 6), shape=(3, 8)), "reshape", False),  # 3 rows: no halves
    (_one("softmax", (4, 3), axis=0), "softmax", False),
    (_one("pad", (4, 3), pads=(0, 1, 0, 2)), "pad", True),
    (_one("pad", (4, 3), pads=(1, 0, 0, 0)), "pad", False),
])
def test_chosen_cases_are_accepted_or_refused_and_agree(graph: Graph, op: str,
                                                        accepted: bool) -> None:
    node, types, values, full = _node_values(graph, op)
    got = chunks_agree(node, types, values, full, (True,), 2, CHUNK_RULES.get(op))
    assert got is (True if accepted else None)
