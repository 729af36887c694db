"""Integer value ranges (`superopt.ir.ranges`): every span holds every value the graph
computes on any input (checked by running it), and the spans of known sources are tight."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from superopt.ir import GraphBuilder, interpret
from superopt.ir.ranges import RANGES, ValueRanges


def test_sources_have_their_exact_spans() -> None:
    b = GraphBuilder()
    x = b.input("x", (3, 7))
    ids = b.weight("ids", (4,), "i64", data=np.array([5, -2, 9, 0]))
    vals, idx = b.topk(x, k=2, axis=1, largest=True)
    arg = b.argmax(x, axes=(0,), keepdims=False)
    ramp = b.iota(shape=(2, 6), axis=1)
    an = ValueRanges(b)
    assert an.span(ids) == (-2, 9)
    assert an.span(idx) == (0, 6)  # positions along the axis of 7
    assert an.span(arg) == (0, 2)
    assert an.span(ramp) == (0, 5)
    assert an.span(vals) is None and an.span(x) is None  # floats: no integer span
    assert an.index_bound(idx) == 7 and an.index_bound(ids) is None  # -2 would wrap


def test_a_routers_shifted_ids_times_a_count() -> None:
    # LongCat-Flash's `(top_k_ids - n) * n`, and a select between it and a constant.
    b = GraphBuilder()
    x = b.input("x", (5, 12))
    _, idx = b.topk(x, k=3, axis=1, largest=True)
    n = b.weight("n", (), "i64", data=np.array(8))
    shifted = b.ewmul(b.sub(idx, n), n)
    picked = b.where(b.lt(idx, n), shifted, b.weight("zero", (), "i64", data=np.array(0)))
    an = ValueRanges(b)
    assert an.span(shifted) == ((0 - 8) * 8, (11 - 8) * 8)
    assert an.span(picked) == (-64, 24)


def test_a_sum_spans_its_terms_times_their_count() -> None:
    b = GraphBuilder()
    w = b.weight("w", (4, 3), "i64", data=np.array([[2, 3, 5]] * 4))
    an = ValueRanges(b)
    assert an.span(b.reduce_sum(w, axes=(0,), keepdims=False)) == (8, 20)  # 4 terms in [2, 5]
    assert an.span(b.reduce_sum(w, axes=(0, 1), keepdims=False)) == (24, 60)


def test_an_unknown_operand_makes_the_result_unknown() -> None:
    b = GraphBuilder()
    free = b.input("ids", (4,), "i64")  # a caller's values: no promise
    known = b.weight("k", (4,), "i64", data=np.arange(4))
    an = ValueRanges(b)
    assert an.span(free) is None
    assert an.span(b.ewadd(free, known)) is None
    assert an.span(b.cast(free, to="bool")) == (0, 1)  # whatever it was


def test_float_only_ops_say_why() -> None:
    assert not RANGES.supports("softmax") and not RANGES.supports("exp")
    assert RANGES.supports("reshape") and RANGES.supports("gather")


_STEPS = st.lists(st.tuples(st.sampled_from(["add", "sub", "mul", "max", "min", "where", "concat", "cast32",
                                             "transpose", "slice", "sum", "gather"]),
                            st.integers(0, 1000)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(_STEPS, st.integers(0, 2**31 - 1))
def test_spans_hold_every_computed_value(steps: list[tuple[str, int]], seed: int) -> None:
    """Random chains of integer ops over known sources: run on random inputs, every value
    with a span lies inside it."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    _, idx = b.topk(x, k=6, axis=1, largest=True)  # (4, 6) of 0..5
    table = b.weight("t", (4, 6), "i64", data=rng.integers(-20, 20, (4, 6)))
    pool = [idx, table, b.iota(shape=(4, 6), axis=0)]
    for op, pick in steps:
        a, c = pool[pick % len(pool)], pool[(pick // 7) % len(pool)]
        if op == "add":
            v = b.ewadd(a, c)
        elif op == "sub":
            v = b.sub(a, c)
        elif op == "mul":
            v = b.ewmul(a, c)
        elif op in ("max", "min"):
            v = b.op("maximum" if op == "max" else "minimum", a, c)
        elif op == "where":
            v = b.where(b.gt(a, c), a, c)
        elif op == "concat":
            v = b.slice(b.concat(a, c, axis=1), starts=(0, 3), ends=(4, 9))
        elif op == "cast32":
            v = b.cast(b.cast(a, to="i32"), to="i64")
        elif op == "transpose":
            v = b.reshape(b.transpose(a, perm=(1, 0)), shape=(4, 6))
        elif op == "slice":
            v = b.expand(b.slice(a, starts=(1, 0), ends=(2, 6)), shape=(4, 6))
        elif op == "sum":
            v = b.expand(b.reduce_sum(a, axes=(0,), keepdims=True), shape=(4, 6))
        else:
            v = b.gather(b.reshape(table, shape=(24,)), b.reshape(idx, shape=(4, 6)), axis=0)
        pool.append(v)
    graph = b.build(pool)  # every value an output, in the pool's order
    an = ValueRanges(b)
    for s in range(3):
        values = interpret(graph, {"x": np.random.default_rng(s).standard_normal((4, 6))})
        for v, got in zip(pool, values, strict=True):
            span = an.span(v)
            if span is not None:
                assert span[0] <= got.min() and got.max() <= span[1], (v, span, got)
