"""The torch backend: its lowering agrees with the reference interpreter on every op case,
it honours hand-worked semantics (SAME padding, pooling pads, ONNX LRN), and it times."""

from __future__ import annotations

import math
import weakref

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from op_cases import OP_CASES, op_case
from superopt.backends.torch import (
    LOWERING,
    BackendError,
    benchmark,
    compare,
    lower,
    run,
)
from superopt.ir import OPS, FeedError, Graph, GraphBuilder, MissingRule, interpret

PROPERTY = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_lowering_has_a_real_rule_for_every_op() -> None:
    assert LOWERING.name == "torch"
    assert LOWERING.missing() == []
    assert LOWERING.stale() == []
    assert [op for op in sorted(OPS) if not LOWERING.supports(op)] == []


@pytest.mark.parametrize("op", sorted(OP_CASES))
@PROPERTY
@given(data=st.data())
def test_lowering_matches_reference(op: str, data: st.DataObject) -> None:
    graph = data.draw(op_case(op))
    exact = compare(graph, dtype=torch.float64, rtol=1e-6, atol=1e-12)
    assert exact.ok, exact.summary()
    # atol: float32 rounding of O(1) intermediates (eps 1.2e-7) survives cancellation, as in
    # gelu(-4) = 0.5 x (1 + erf(-2.8)), where a tensor of only such values has a tiny scale.
    single = compare(graph, dtype=torch.float32, rtol=1e-4, atol=1e-6)
    assert single.ok, single.summary()


# ---- hand-worked semantics ------------------------------------------------------------------

def _unary_graph(shape: tuple[int, ...], build) -> Graph:  # type: ignore[no-untyped-def]
    b = GraphBuilder()
    x = b.input("x", shape)
    return b.build(build(b, x))


def test_same_padding_puts_the_extra_pad_at_the_end() -> None:
    # 4x4 ones, 2x2 ones kernel, stride 1: SAME pads 0 before and 1 after, so the last
    # row and column see half a window and the corner a quarter.
    b = GraphBuilder()
    x = b.input("x", (1, 1, 4, 4))
    w = b.weight("w", (1, 1, 2, 2), init="ones")
    g = b.build(b.conv2d(x, w, padding="same"))
    (y,) = run(g, {"x": np.ones((1, 1, 4, 4))}, dtype=torch.float64)
    want = np.full((4, 4), 4.0)
    want[3, :], want[:, 3] = 2.0, 2.0
    want[3, 3] = 1.0
    np.testing.assert_array_equal(y[0, 0], want)


def test_max_pool_padding_never_wins() -> None:
    g = _unary_graph((1, 1, 2, 2), lambda b, x: b.pool2d_max(
        x, kernel=(2, 2), stride=(1, 1), padding=(1, 1, 1, 0)))
    x = -np.arange(1.0, 5.0).reshape(1, 1, 2, 2)  # [[-1, -2], [-3, -4]], all below the pad 0
    (y,) = run(g, {"x": x}, dtype=torch.float64)
    # Rows: pad, -1 -2, -3 -4; columns: pad, a, b.  Windows of 2x2, stride 1.
    np.testing.assert_array_equal(y[0, 0], [[-1.0, -1.0], [-1.0, -1.0], [-3.0, -3.0]])


@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("padding", [(1, 1, 1, 1), (0, 1, 1, 0)])
def test_avg_pool_divisor(include: bool, padding: tuple[int, int, int, int]) -> None:
    g = _unary_graph((1, 1, 3, 3), lambda b, x: b.pool2d_avg(
        x, kernel=(2, 2), stride=(1, 1), padding=padding, count_include_pad=include))
    (y,) = run(g, {"x": np.ones((1, 1, 3, 3))}, dtype=torch.float64)
    if include:
        # Each window averages its real cells (ones) over all 4 cells.
        top, bottom, left, right = padding
        rows = np.r_[[0.5] * top, [1.0] * 2, [0.5] * bottom]
        cols = np.r_[[0.5] * left, [1.0] * 2, [0.5] * right]
        np.testing.assert_allclose(y[0, 0], np.outer(rows, cols))
    else:
        np.testing.assert_allclose(y[0, 0], np.ones(y.shape[2:]))


def test_lrn_even_size_uses_the_onnx_window() -> None:
    # size 2: channel c sums the squares of channels c and c+1 (ONNX: floor((size-1)/2)
    # channels before c, ceil((size-1)/2) after).
    g = _unary_graph((1, 3, 1, 1), lambda b, x: b.lrn(x, size=2, alpha=2.0, beta=1.0, bias=1.0))
    x = np.array([1.0, 2.0, 3.0]).reshape(1, 3, 1, 1)
    (y,) = run(g, {"x": x}, dtype=torch.float64)
    sums = np.array([1.0 + 4.0, 4.0 + 9.0, 9.0])
    np.testing.assert_allclose(y.ravel(), x.ravel() / (1.0 + 2.0 / 2 * sums))


def test_pad_uses_onnx_order() -> None:
    g = _unary_graph((2, 3), lambda b, x: b.pad(x, pads=(1, 0, 0, 2)))  # rows before, cols after
    (y,) = run(g, {"x": np.ones((2, 3))}, dtype=torch.float64)
    want = np.zeros((3, 5))
    want[1:, :3] = 1.0
    np.testing.assert_array_equal(y, want)


def test_split_returns_every_piece() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 6))
    a, c, d = b.split(x, axis=-1, sizes=(1, 0, 5))
    g = b.build([d, a, c])
    data = np.arange(12.0).reshape(2, 6)
    outs = run(g, {"x": data}, dtype=torch.float64)
    np.testing.assert_array_equal(outs[0], data[:, 1:])
    np.testing.assert_array_equal(outs[1], data[:, :1])
    assert outs[2].shape == (2, 0)


# ---- sources, dtypes, feeds ------------------------------------------------------------------

def _embedding_graph() -> Graph:
    b = GraphBuilder("emb")
    ids = b.input("ids", (2, 3), "i64", high=7)
    table = b.weight("table", (7, 4), init="normal")
    return b.build([b.embedding(ids, table), ids])


def test_integer_inputs_stay_int64() -> None:
    g = _embedding_graph()
    vectors, ids = run(g, dtype=torch.float32)
    assert ids.dtype == np.int64 and vectors.dtype == np.float32
    ref_vectors, ref_ids = interpret(g)  # type: ignore[misc]
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(vectors, ref_vectors, rtol=1e-6)


def test_weight_data_and_feeds_override_draws() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 2))
    w = b.weight("w", (2, 2), data=np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32))
    v = b.weight("v", (2, 2))
    g = b.build(b.ewadd(b.matmul(x, w), v))
    x_val = np.array([[1.0, 0.0], [0.0, 1.0]])
    (y,) = run(g, {"x": x_val, "v": np.zeros((2, 2))}, dtype=torch.float64)
    np.testing.assert_array_equal(y, [[1.0, 2.0], [3.0, 4.0]])
    (y2,) = run(g, {"x": torch.eye(2), "v": np.ones((2, 2))}, dtype=torch.float64)
    np.testing.assert_array_equal(y2, [[2.0, 3.0], [4.0, 5.0]])


def test_seed_changes_drawn_values_like_the_reference() -> None:
    g = _unary_graph((3, 4), lambda b, x: b.tanh(x))
    first, second = run(g, seed=1, dtype=torch.float64), run(g, seed=2, dtype=torch.float64)
    assert not np.array_equal(first[0], second[0])
    np.testing.assert_allclose(second[0], interpret(g, seed=2)[0], rtol=1e-12)


@pytest.mark.parametrize("feeds, problem", [
    ({"nope": np.zeros(3)}, "no input or weight named 'nope'"),
    ({"x": np.zeros((3, 5))}, "expects"),
    ({"x": torch.zeros(4, 3)}, "expects"),
])
def test_bad_feeds_raise_feed_error(feeds: dict[str, object], problem: str) -> None:
    g = _unary_graph((3, 4), lambda b, x: b.relu(x))
    with pytest.raises(FeedError, match=problem):
        run(g, feeds)
    with pytest.raises(FeedError, match=problem):
        compare(g, feeds)


def test_bad_device_and_dtype_are_clear_errors() -> None:
    g = _unary_graph((2,), lambda b, x: b.relu(x))
    with pytest.raises(BackendError, match="dtype"):
        run(g, dtype=torch.int32)
    with pytest.raises(BackendError, match="dtype"):
        run(g, dtype="f8")
    if not torch.cuda.is_available():
        with pytest.raises(BackendError, match="cuda"):
            run(g, device="cuda")


def test_out_of_range_ids_name_the_node() -> None:
    g = _embedding_graph()
    with pytest.raises(BackendError, match="embedding"):
        run(g, {"ids": np.full((2, 3), 9)})


def test_missing_rule_names_the_table_and_op(monkeypatch: pytest.MonkeyPatch) -> None:
    g = _unary_graph((2,), lambda b, x: b.relu(x))
    monkeypatch.delitem(LOWERING._rules, "relu")
    with pytest.raises(MissingRule, match="torch.*relu"):
        lower(g)


def test_comparison_flags_a_wrong_result() -> None:
    g = _unary_graph((2, 3), lambda b, x: b.sigmoid(x))
    good = compare(g)
    assert good.ok and good.max_abs_err < 1e-12
    from superopt.backends.torch import compare_arrays

    bad = compare_arrays(0, np.zeros((2, 3)), np.ones((2, 3)), rtol=1e-4, atol=0.0)
    assert not bad.ok and bad.max_abs_err == 1.0 and bad.rel_err == 1.0
    shape = compare_arrays(0, np.zeros((3, 2)), np.zeros((2, 3)), rtol=1e-4, atol=0.0)
    assert not shape.ok and "shape" in shape.problem
    inf = compare_arrays(0, np.array([-np.inf, 1.0]), np.array([-np.inf, 1.0]), 1e-4, 0.0)
    assert inf.ok


# ---- memory and timing -------------------------------------------------------------------

def test_intermediates_are_freed_after_their_last_use() -> None:
    b = GraphBuilder()
    x = b.input("x", (64, 64))
    y = x
    for _ in range(6):
        y = b.tanh(y)
    g = b.build(b.ewadd(y, x))  # x stays live to the end; each tanh frees its input
    program = lower(g, dtype=torch.float64)
    produced: list[weakref.ref[torch.Tensor]] = []
    alive: list[int] = []
    for step in program._steps:
        inner = step.kernel

        def kernel(args, inner=inner):  # type: ignore[no-untyped-def]
            alive.append(sum(r() is not None for r in produced))
            out = inner(args)
            produced.extend(weakref.ref(t) for t in out)
            return out

        object.__setattr__(step, "kernel", kernel)
    (out,) = program()
    # When a tanh runs, only x and its own input may be alive; never the whole chain.
    assert max(alive) <= 2
    np.testing.assert_allclose(out.numpy(), interpret(g)[0], rtol=1e-12)


def test_benchmark_returns_sane_times() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 4, 16, 16))
    w = b.weight("w", (8, 4, 3, 3))
    g = b.build(b.relu(b.conv2d(x, w, padding="same")))
    t = benchmark(g, warmup=1, repeats=5)
    assert len(t.times) == 5
    assert all(0 < s < 5.0 for s in t.times)
    assert t.min <= t.median <= max(t.times)
    assert t.device == "cpu" and t.dtype == "torch.float32" and t.threads >= 1
    assert t.omp_wait_policy == "PASSIVE"
    with pytest.raises(BackendError, match="repeats"):
        benchmark(g, repeats=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_reference() -> None:  # pragma: no cover - only with a GPU
    g = _unary_graph((1, 3, 8, 8), lambda b, x: b.pool2d_max(x, kernel=(3, 3), padding="same"))
    assert compare(g, device="cuda", dtype=torch.float32).ok


def _vgg19(batch: int = 1, size: int = 224) -> Graph:
    b = GraphBuilder("vgg19")
    x = b.input("image", (batch, 3, size, size))
    channels = 3
    for stage, (width, convs) in enumerate([(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)]):
        for i in range(convs):
            w = b.weight(f"conv{stage}_{i}", (width, channels, 3, 3))
            bias = b.weight(f"bias{stage}_{i}", (1, width, 1, 1), init="zeros")
            x = b.relu(b.ewadd(b.conv2d(x, w, padding=(1, 1, 1, 1)), bias))
            channels = width
        x = b.pool2d_max(x, kernel=(2, 2), stride=(2, 2))
    x = b.reshape(x, shape=(batch, -1))
    for i, width in enumerate((4096, 4096, 1000)):
        w = b.weight(f"fc{i}", (b.shape(x)[1], width))
        x = b.matmul(x, w, activation="relu" if i < 2 else "none")
    return b.build(b.softmax(x, axis=-1))


@pytest.mark.slow
def test_vgg19_runs_at_batch_1() -> None:
    g = _vgg19()
    (probs,) = run(g)
    assert probs.shape == (1, 1000)
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-4)


def test_small_vgg_matches_reference() -> None:
    g = _vgg19(size=32)
    c = compare(g, dtype=torch.float32, rtol=1e-4)
    assert c.ok, c.summary()


# ---- transformer-era ops, hand-worked ------------------------------------------------------

def test_gather_counts_negative_indices_from_the_end() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    ids = b.input("ids", (2,), "i64", high=3)
    g = b.build(b.gather(x, ids, axis=1))
    (y,) = run(g, {"x": np.arange(6.0).reshape(2, 3), "ids": np.array([-1, 0])},
               dtype=torch.float64)
    np.testing.assert_array_equal(y, [[2.0, 0.0], [5.0, 3.0]])


def test_grouped_query_attention_serves_consecutive_heads() -> None:
    # 4 query heads over 2 K/V heads: query heads 0 and 1 read K/V head 0, heads 2 and 3
    # read head 1. V head h is constant h + 1, so each output row is a convex combination
    # of equal values: exactly its K/V head's constant, whatever the scores.
    b = GraphBuilder()
    q, k = b.input("q", (1, 4, 3, 2)), b.input("k", (1, 2, 3, 2))
    v = b.input("v", (1, 2, 3, 2))
    g = b.build(b.attention(q, k, v, causal=True))
    rng = np.random.default_rng(0)
    vals = np.stack([np.full((3, 2), 1.0), np.full((3, 2), 2.0)])[None]
    (y,) = run(g, {"q": rng.standard_normal((1, 4, 3, 2)),
                   "k": rng.standard_normal((1, 2, 3, 2)), "v": vals}, dtype=torch.float64)
    np.testing.assert_allclose(y[0, :, 0, 0], [1.0, 1.0, 2.0, 2.0])


def test_causal_attention_first_query_sees_only_the_first_key() -> None:
    b = GraphBuilder()
    q, k, v = (b.input(n, (1, 3, 2)) for n in "qkv")
    g = b.build(b.attention(q, k, v, causal=True))
    vals = np.arange(6.0).reshape(1, 3, 2)
    ones = np.ones((1, 3, 2))
    (y,) = run(g, {"q": ones, "k": ones, "v": vals}, dtype=torch.float64)
    # Equal scores: row i averages V rows 0..i.
    np.testing.assert_allclose(y[0], [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]])


def test_cast_truncates_toward_zero_and_booleans_select() -> None:
    b = GraphBuilder()
    x = b.input("x", (4,))
    c = b.input("c", (4,), "bool", high=2)
    g = b.build([b.cast(x, to="i32"), b.cast(x, to="bool"), b.where(c, x, b.neg(x))])
    xs = np.array([-1.7, 1.7, 0.0, -0.2])
    ints, bools, sel = run(g, {"x": xs, "c": np.array([1, 0, 1, 0])}, dtype=torch.float64)
    np.testing.assert_array_equal(ints, [-1, 1, 0, 0])
    np.testing.assert_array_equal(bools, [1, 1, 0, 1])
    np.testing.assert_array_equal(sel, [-1.7, -1.7, 0.0, 0.2])
