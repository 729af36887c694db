"""Reference semantics of the op set, checked against independent naive definitions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from superopt.ir import GraphBuilder, ShapeError, interpret
from superopt.ir.kernels import same_pads


def _run(build, feeds):
    b = GraphBuilder()
    out = build(b)
    return interpret(b.build(out if isinstance(out, list) else [out]), feeds)


def naive_conv(x, w, stride, pads, dilation, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    t, bo, le, r = pads
    xp = np.zeros((n, c, h + t + bo, wd + le + r))
    xp[:, :, t:t + h, le:le + wd] = x
    oh = (h + t + bo - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (wd + le + r - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b_, oc, i, j in itertools.product(range(n), range(o), range(oh), range(ow)):
        g = oc // og
        acc = 0.0
        for ci, di, dj in itertools.product(range(cg), range(kh), range(kw)):
            acc += (xp[b_, g * cg + ci, i * stride[0] + di * dilation[0],
                       j * stride[1] + dj * dilation[1]] * w[oc, ci, di, dj])
        out[b_, oc, i, j] = acc
    return out


@pytest.mark.parametrize("stride,dilation,groups,padding", [
    ((1, 1), (1, 1), 1, "same"), ((2, 1), (1, 1), 2, "valid"), ((1, 2), (2, 1), 1, (1, 0, 2, 1)),
    ((2, 2), (1, 1), 4, "same"),
])
def test_conv2d_matches_naive_loops(stride, dilation, groups, padding) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((4, 4 // groups, 3, 2))
    (y,) = _run(lambda b: b.conv2d(b.input("x", x.shape), b.weight("w", w.shape), stride=stride,
                                   dilation=dilation, groups=groups, padding=padding),
                {"x": x, "w": w})
    if padding == "same":
        pads = (*same_pads(7, 3, stride[0], dilation[0]), *same_pads(6, 2, stride[1], dilation[1]))
    elif padding == "valid":
        pads = (0, 0, 0, 0)
    else:
        pads = padding
    np.testing.assert_allclose(y, naive_conv(x, w, stride, pads, dilation, groups), rtol=1e-12)


def test_same_padding_gives_ceil_output_size() -> None:
    for size, k, s in itertools.product(range(1, 12), (1, 2, 3, 5), (1, 2, 3)):
        lo, hi = same_pads(size, k, s, 1)
        assert (size + lo + hi - k) // s + 1 == -(-size // s)
        assert hi - lo in (0, 1)


def test_pooling_matches_naive_definitions() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 5, 5))
    feeds = {"x": x}
    (mx,) = _run(lambda b: b.pool2d_max(b.input("x", x.shape), kernel=(3, 3), stride=(2, 2),
                                        padding=(1, 1, 1, 1)), feeds)
    (av,) = _run(lambda b: b.pool2d_avg(b.input("x", x.shape), kernel=(3, 3), stride=(2, 2),
                                        padding=(1, 1, 1, 1), count_include_pad=False), feeds)
    (avp,) = _run(lambda b: b.pool2d_avg(b.input("x", x.shape), kernel=(3, 3), stride=(2, 2),
                                         padding=(1, 1, 1, 1)), feeds)
    for i, j in itertools.product(range(3), range(3)):
        rows = range(max(0, 2 * i - 1), min(5, 2 * i + 2))
        cols = range(max(0, 2 * j - 1), min(5, 2 * j + 2))
        cells = x[:, :, rows][:, :, :, cols]
        np.testing.assert_allclose(mx[:, :, i, j], cells.max(axis=(2, 3)))
        np.testing.assert_allclose(av[:, :, i, j], cells.mean(axis=(2, 3)))
        np.testing.assert_allclose(avp[:, :, i, j], cells.sum(axis=(2, 3)) / 9)


def test_taso_constants_have_their_identities() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 5))
    feeds = {"x": x}

    def iconv(b):
        return b.conv2d(b.input("x", x.shape), b.const_iconv(channels=4, kh=3, kw=3), padding="same")

    np.testing.assert_allclose(_run(iconv, feeds)[0], x)

    def pool_as_conv(b):
        xi = b.input("x", x.shape)
        return [b.pool2d_avg(xi, kernel=(3, 3), padding="same"),
                b.conv2d(xi, b.const_pool(channels=4, kh=3, kw=3), padding="same", groups=4)]

    a, c = _run(pool_as_conv, feeds)
    np.testing.assert_allclose(a, c, rtol=1e-12)
    m = rng.standard_normal((3, 4))
    (y,) = _run(lambda b: b.matmul(b.input("m", m.shape), b.const_imm(n=4)), {"m": m})
    np.testing.assert_allclose(y, m)
    (y,) = _run(lambda b: b.ewmul(b.input("m", m.shape), b.const_one(shape=(3, 4))), {"m": m})
    np.testing.assert_allclose(y, m)


def test_enlarge_then_conv_equals_small_conv() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 6, 6))
    w = rng.standard_normal((3, 2, 1, 1))

    def both(b):
        xi, wi = b.input("x", x.shape), b.weight("w", w.shape)
        return [b.conv2d(xi, wi, padding="same"), b.conv2d(xi, b.enlarge(wi, kh=3, kw=3), padding="same")]

    a, c = _run(both, {"x": x, "w": w})
    np.testing.assert_allclose(a, c, rtol=1e-12)


def test_movement_ops() -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    (y,) = _run(lambda b: b.slice(b.input("x", x.shape), starts=(0, 1, -3), ends=(2, 3, 4),
                                  steps=(1, 1, 2)), {"x": x})
    np.testing.assert_array_equal(y, x[:, 1:3, 1:4:2])
    (y,) = _run(lambda b: b.pad(b.input("x", x.shape), pads=(0, 1, 0, 1, 0, 2)), {"x": x})
    assert y.shape == (3, 4, 6) and y[:2, 1:4, :4].sum() == x.sum() and y.sum() == x.sum()
    (y,) = _run(lambda b: b.transpose(b.input("x", x.shape), perm=(2, 0, 1)), {"x": x})
    assert y[3, 1, 2] == x[1, 2, 3]
    (y,) = _run(lambda b: b.reshape(b.input("x", x.shape), shape=(4, -1)), {"x": x})
    assert y.shape == (4, 6)
    with pytest.raises(ShapeError, match="reshape"):
        _run(lambda b: b.reshape(b.input("x", x.shape), shape=(5, -1)), {"x": x})


def test_normalisations() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 8)) * 3 + 1
    (y,) = _run(lambda b: b.layer_norm(b.input("x", x.shape), b.weight("g", (8,), init="ones"),
                                       b.weight("bt", (8,), init="zeros"), eps=0.0), {"x": x})
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.std(-1), 1, rtol=1e-9)
    (s,) = _run(lambda b: b.softmax(b.input("x", x.shape), axis=1), {"x": x})
    np.testing.assert_allclose(s.sum(axis=1), 1)
    assert (s > 0).all()
    (r,) = _run(lambda b: b.reduce_mean(b.input("x", x.shape), axes=(0, -1), keepdims=True),
                {"x": x})
    assert r.shape == (1, 3, 1)
    np.testing.assert_allclose(r[0, :, 0], [x[:, c, :].mean() for c in range(3)])
    img = rng.standard_normal((2, 3, 2, 2))
    (bn,) = _run(lambda b: b.batch_norm(b.input("x", img.shape), b.weight("s", (3,), init="ones"),
                                        b.weight("bb", (3,), init="zeros"),
                                        b.weight("m", (3,), init="zeros"),
                                        b.weight("v", (3,), init="ones"), eps=0.0), {"x": img})
    np.testing.assert_allclose(bn, img)


def test_gelu_and_activations() -> None:
    x = np.linspace(-4, 4, 17)
    (g,) = _run(lambda b: b.gelu(b.input("x", x.shape)), {"x": x})
    (gt,) = _run(lambda b: b.gelu(b.input("x", x.shape), approximate="tanh"), {"x": x})
    # Independent facts: gelu(0) = 0, gelu(x) - gelu(-x) = x, tanh form within 1e-3.
    assert abs(g[8]) < 1e-15
    np.testing.assert_allclose(g - g[::-1], x, atol=1e-12)
    np.testing.assert_allclose(g, gt, atol=1e-3)
    (sg,) = _run(lambda b: b.sigmoid(b.input("x", x.shape)), {"x": x})
    np.testing.assert_allclose(sg + sg[::-1], 1)


def test_embedding_lookup_and_bounds() -> None:
    table = np.arange(12.0).reshape(4, 3)

    def emb(b):
        return b.embedding(b.input("ids", (2, 2), "i64", high=4), b.weight("t", (4, 3)))

    (y,) = _run(emb, {"ids": np.array([[0, 3], [2, 2]]), "t": table})
    np.testing.assert_array_equal(y[0, 1], table[3])
    with pytest.raises(Exception, match="out of range"):
        _run(emb, {"ids": np.array([[0, 4], [2, 2]]), "t": table})


def test_linear_is_a_matmul_by_the_transposed_weight_plus_the_bias() -> None:
    rng = np.random.default_rng(1)
    x, w, bias = rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4)), rng.standard_normal(5)
    b = GraphBuilder()
    y = b.linear(b.input("x", x.shape), b.input("w", w.shape), b.input("b", bias.shape),
                 activation="relu")
    g = b.build([y])
    assert g.type_of(y).shape == (2, 3, 5)
    (got,) = interpret(g, {"x": x, "w": w, "b": bias})
    want = np.maximum(np.einsum("bmk,nk->bmn", x, w) + bias, 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("w,bias,problem", [((5, 3), (5,), "input 1"),  # K mismatch
                                            ((5, 4), (4,), "input 2"),  # bias not N
                                            ((1, 5, 4), (5,), "input 1"),  # batched weight
                                            ((5, 4), (1, 5), "input 2")])  # rank-2 bias
def test_linear_rejects_weights_and_biases_that_do_not_fit(w: tuple, bias: tuple,
                                                          problem: str) -> None:
    b = GraphBuilder()
    with pytest.raises(ShapeError, match=f"linear.*{problem}"):
        b.linear(b.input("x", (3, 4)), b.input("w", w), b.input("b", bias))


@pytest.mark.parametrize("op", ["sigmoid", "silu"])
def test_logistic_references_reach_their_limits_without_overflow_warnings(op: str) -> None:
    # e^-x overflows below about -709; the quotient is the exact limit, and numpy's
    # warning about it would print on every value check of a model with large activations.
    import warnings

    from superopt.ir.opdef import get_op

    x = np.array([-1000.0, -20.0, 0.0, 20.0, 1000.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = get_op(op).reference((x,), {})
    sig = np.array([0.0, 1.0 / (1.0 + np.exp(20.0)), 0.5, 1.0 / (1.0 + np.exp(-20.0)), 1.0])
    np.testing.assert_allclose(y, sig if op == "sigmoid" else x * sig, rtol=1e-15, atol=0)
