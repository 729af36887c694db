"""The interpreter's three semantics: reference, exact mod p, and abstract shapes."""

from __future__ import annotations

import numpy as np
import pytest

from superopt.ir import FeedError, GraphBuilder, P, interpret, random_feeds
from superopt.ir.kernels import modp_matmul


def _linear_graph():
    b = GraphBuilder("lin")
    x = b.input("x", (2, 3, 6, 6))
    w = b.weight("w", (4, 3, 3, 3))
    m = b.weight("m", (4, 5))
    y = b.conv2d(x, w, padding="same", stride=(1, 1))
    y = b.pool2d_avg(b.pad(y, pads=(0, 0, 1, 1, 0, 0, 1, 1)), kernel=(2, 2), stride=(2, 2))
    y = b.matmul(b.concat(y, b.transpose(y, perm=(0, 1, 3, 2)), axis=1), m)
    s = b.weight("s", ())
    y = b.ewadd(b.smul(y, s), b.reduce_sum(y, axes=(1,), keepdims=True))
    return b.build([y])


def test_modp_agrees_with_exact_integer_arithmetic_on_linear_graphs() -> None:
    # Small non-negative integers: the float64 reference is exact, and so is mod p; the
    # only division (avg pool by 4) becomes a multiplication by 4's inverse mod p.
    g = _linear_graph()
    rng = np.random.default_rng(0)
    feeds = {n.attr("name"): rng.integers(0, 5, n.type.shape) for n in g.nodes
             if n.op in ("input", "weight")}
    (ref,) = interpret(g, feeds)
    (exact,) = interpret(g, feeds, semantics="modp")
    ref4 = np.rint(ref * 4).astype(np.int64)  # undo the /4 of the pool to stay in integers
    np.testing.assert_array_equal(exact * 4 % P, ref4 % P)


def test_modp_matmul_is_exact_for_large_residues() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(P - 1000, P, (3, 70))
    b = rng.integers(P - 1000, P, (70, 2))
    want = [[sum(int(a[i, k]) * int(b[k, j]) for k in range(70)) % P for j in range(2)]
            for i in range(3)]
    assert modp_matmul(a, b).tolist() == want


def _unary(op: str, x: np.ndarray, **attrs) -> np.ndarray:
    b = GraphBuilder()
    g = b.build([b.op(op, b.input("x", x.shape), **attrs)])
    return interpret(g, {"x": x}, semantics="modp")[0]


def test_modp_nonlinear_definitions_keep_real_identities() -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, P, 200)
    neg = (P - x) % P
    assert ((_unary("relu", x) - _unary("relu", neg)) % P == x).all()
    assert ((_unary("tanh", x) + _unary("tanh", neg)) % P == 0).all()
    assert ((_unary("sigmoid", x) + _unary("sigmoid", neg)) % P == 1).all()
    for approx in ("none", "tanh"):
        assert ((_unary("gelu", x, approximate=approx) - _unary("gelu", neg, approximate=approx))
                % P == x).all()
    s = _unary("softmax", x.reshape(20, 10), axis=1)
    assert (s.sum(axis=1) % P == 1).all()
    # relu over the centred residue: small positives pass, small negatives vanish.
    assert _unary("relu", np.array([5, P - 5])).tolist() == [5, 0]


def test_modp_is_deterministic_and_distinguishes_activations() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, P, 64)
    assert (_unary("tanh", x) == _unary("tanh", x)).all()
    assert (_unary("tanh", x) != _unary("sigmoid", x)).mean() > 0.9
    assert (_unary("gelu", x) != _unary("gelu", x, approximate="tanh")).mean() > 0.9


def test_modp_max_pool_uses_centred_order() -> None:
    x = np.array([P - 1, 3, 2, P - 7]).reshape(1, 1, 2, 2)  # -1, 3, 2, -7
    (y,) = interpret(_pool_graph(), {"x": x}, semantics="modp")
    assert y.item() == 3
    x = np.array([P - 1, P - 3, P - 2, P - 7]).reshape(1, 1, 2, 2)
    (y,) = interpret(_pool_graph(), {"x": x}, semantics="modp")
    assert y.item() == P - 1


def _pool_graph():
    b = GraphBuilder()
    return b.build([b.pool2d_max(b.input("x", (1, 1, 2, 2)), kernel=(2, 2))])


def test_shapes_semantics_matches_real_shapes() -> None:
    g = _linear_graph()
    shapes = interpret(g, semantics="shapes")
    values = interpret(g)
    assert [t.shape for t in shapes] == [v.shape for v in values]


def test_sources_are_deterministic_per_name_and_seed() -> None:
    g = _linear_graph()
    a, b, c = interpret(g, seed=0)[0], interpret(g, seed=0)[0], interpret(g, seed=1)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    feeds = random_feeds(g, seed=0)
    assert set(feeds) == {"x"}


def test_feed_errors_name_the_input() -> None:
    g = _linear_graph()
    with pytest.raises(FeedError, match="'x' expects f32\\[2,3,6,6\\]"):
        interpret(g, {"x": np.zeros((1, 3, 6, 6))})
    with pytest.raises(FeedError, match="no input or weight named 'y'"):
        interpret(g, {"y": np.zeros(3)})
    with pytest.raises(FeedError, match="integers"):
        interpret(g, {"x": np.zeros((2, 3, 6, 6))}, semantics="modp")


def test_keep_returns_every_value() -> None:
    g = _linear_graph()
    every = interpret(g, keep=True)
    assert len(every) == sum(len(n.types) for n in g.nodes)


def test_random_feeds_check_the_memory_of_what_they_draw_only() -> None:
    """A model's weights are not drawn for its input feeds, so they do not count against
    the memory the feeds need (a 5 GB language model's 16 token ids were refused)."""
    from superopt.ir.memory import MemoryLimitError

    b = GraphBuilder("big")
    x = b.input("x", (2, 3))
    w = b.weight("w", (1 << 20, 1 << 20))  # 4 TiB at f32, never drawn here
    y = b.op("ewadd", x, b.op("reduce_sum", b.op("slice", w, starts=(0, 0), ends=(2, 3)),
                              axes=()))
    g = b.build([y])
    feeds = random_feeds(g, seed=0)
    assert set(feeds) == {"x"} and feeds["x"].shape == (2, 3)
    with pytest.raises(MemoryLimitError, match=r"random feeds of graph 'big'.*'w'"):
        random_feeds(g, seed=0, include_weights=True)
    with pytest.raises(MemoryLimitError):
        interpret(g, {"x": feeds["x"]})  # running it needs the weight


@pytest.mark.parametrize("init", [None, "fan_in", "positive"])
def test_drawn_floats_are_values_a_float32_tensor_holds(init: str | None) -> None:
    # A model's weights are float32 data: a draw that float32 could not hold would make
    # a rewrite that stores its folded weights as float32 look inexact.
    b = GraphBuilder("draws")
    x = b.input("x", (3, 8))
    w = b.weight("w", (8, 5), **({"init": init} if init else {}))
    g = b.build([b.matmul(x, w)])
    for v in random_feeds(g, seed=4, include_weights=True).values():
        assert v.dtype == np.float64
        assert np.array_equal(v, v.astype(np.float32))
        assert len(np.unique(v)) == v.size  # still random, not collapsed
