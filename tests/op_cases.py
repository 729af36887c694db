"""The shared table of op cases for property tests (DESIGN.md sections 2 and 12).

`OP_CASES[op]()` is a hypothesis strategy that draws a small, valid graph exercising `op`
with varied attributes and shapes. Cases are valid by construction: attributes are drawn
first and shapes are derived from them, so no example is filtered away. Every subsystem's
property tests (torch lowering, mod-p semantics, verifier axioms, ...) draw from this one
table; adding an op means adding one case here, and `missing_cases()` names the ops
that have none.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, SearchStrategy

from superopt.ir import OPS, Graph, GraphBuilder, Value
from superopt.ir.passes import transform

OpCase = Callable[[], SearchStrategy[Graph]]

OP_CASES: dict[str, OpCase] = {}

MAX_DIM = 6
ACTIVATIONS = ("none", "relu", "sigmoid", "tanh")
INITS = ("fan_in", "normal", "ones", "zeros", "positive")


def case(*ops: str) -> Callable[[OpCase], OpCase]:
    """Register a case for one or more ops (ops with the same signature share a case)."""

    def deco(fn: OpCase) -> OpCase:
        for op in ops:
            if op in OP_CASES:
                raise ValueError(f"op case for {op!r} registered twice")
            OP_CASES[op] = _bind(fn, op) if len(ops) > 1 else fn
        return fn

    return deco


def _bind(fn: Callable[..., SearchStrategy[Graph]], op: str) -> OpCase:
    return lambda: fn(op)


def missing_cases() -> list[str]:
    """Registered ops that have no case in the table."""
    return sorted(set(OPS) - set(OP_CASES))


def stale_cases() -> list[str]:
    """Cases for names that are not registered ops (typos, removed ops)."""
    return sorted(set(OP_CASES) - set(OPS))


def op_case(op: str) -> SearchStrategy[Graph]:
    return OP_CASES[op]()


def any_case() -> SearchStrategy[Graph]:
    """A graph from any op's case."""
    return st.sampled_from(sorted(OP_CASES)).flatmap(op_case)


# ---- building blocks ----------------------------------------------------------------

def dims(lo: int = 1, hi: int = MAX_DIM) -> SearchStrategy[int]:
    return st.integers(lo, hi)


def shapes(min_rank: int = 0, max_rank: int = 4, lo: int = 1,
           hi: int = MAX_DIM) -> SearchStrategy[tuple[int, ...]]:
    return st.lists(dims(lo, hi), min_size=min_rank, max_size=max_rank).map(tuple)


def axis_of(rank: int) -> SearchStrategy[int]:
    """An axis of a rank-`rank` tensor, as a non-negative or a negative index."""
    return st.integers(-rank, rank - 1)


def pairs(lo: int, hi: int) -> SearchStrategy[tuple[int, int]]:
    return st.tuples(st.integers(lo, hi), st.integers(lo, hi))


@st.composite
def weight_data(draw: DrawFn, shape: tuple[int, ...]) -> np.ndarray:
    """Explicit weight data (the path importers take), from a drawn numpy seed."""
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@st.composite
def tensor_source(draw: DrawFn, b: GraphBuilder, name: str, shape: tuple[int, ...],
                  init: str = "fan_in") -> Value:
    """An operand: usually a graph input, sometimes a weight with or without data."""
    kind = draw(st.sampled_from(("input", "input", "weight", "weight_data")))
    if kind == "input":
        return b.input(name, shape)
    if kind == "weight":
        return b.weight(name, shape, init=init)
    return b.weight(name, shape, data=draw(weight_data(shape)))


@st.composite
def broadcast_pair(draw: DrawFn, max_rank: int = 4
                   ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast together under numpy rules (either may be the smaller)."""
    full = draw(shapes(0, max_rank))
    other = list(full[len(full) - draw(st.integers(0, len(full))):])
    for i in range(len(other)):
        if draw(st.booleans()):
            other[i] = 1
    first = list(full)
    # Broadcasting both ways: some 1s in the longer shape too, where the other is not 1.
    offset = len(full) - len(other)
    for i in range(len(other)):
        if other[i] != 1 and draw(st.integers(0, 3)) == 0:
            first[offset + i] = 1
    a, c = tuple(first), tuple(other)
    return (a, c) if draw(st.booleans()) else (c, a)


def _graph(b: GraphBuilder, outputs: Sequence[Value] | Value, op: str) -> Graph:
    g = b.build(outputs, name=f"case_{op}")
    g.lint()
    return g


@st.composite
def padding_for(draw: DrawFn, size: tuple[int, int], kernel: tuple[int, int],
                dilation: tuple[int, int], max_pad: tuple[int, int]
                ) -> str | tuple[int, int, int, int]:
    """'same', 'valid' or explicit pads (each <= max_pad) that give an output >= 1."""
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilation, strict=True)]
    options: list[str] = ["same"]
    if all(s >= e for s, e in zip(size, eff, strict=True)):
        options.append("valid")
    if all(s + 2 * m >= e for s, e, m in zip(size, eff, max_pad, strict=True)):
        options.append("explicit")
    choice = draw(st.sampled_from(options))
    if choice != "explicit":
        return choice
    pads: list[int] = []
    for i in range(2):
        # Draw the low pad so that some high pad <= max_pad still makes room for a window.
        lo = draw(st.integers(max(eff[i] - size[i] - max_pad[i], 0), max_pad[i]))
        hi = draw(st.integers(max(eff[i] - size[i] - lo, 0), max_pad[i]))
        pads += [lo, hi]
    return tuple(pads)  # type: ignore[return-value]


# ---- sources and constants ----------------------------------------------------------

@case("input")
@st.composite
def input_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    if draw(st.booleans()):
        x = b.input("x", shape)
    else:
        x = b.input("ids", shape, "i64", high=draw(st.integers(1, 50)))
    return _graph(b, x, "input")


@case("weight")
@st.composite
def weight_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    if draw(st.booleans()):
        w = b.weight("w", shape, data=draw(weight_data(shape)))
    else:
        w = b.weight("w", shape, init=draw(st.sampled_from(INITS)))
    return _graph(b, w, "weight")


@case("const_pool")
@st.composite
def const_pool_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    c, kh, kw = draw(dims(1, 4)), draw(dims(1, 3)), draw(dims(1, 3))
    k = b.const_pool(channels=c, kh=kh, kw=kw)
    if draw(st.booleans()):
        return _graph(b, k, "const_pool")
    # Used as TASO uses it: a depthwise conv that averages.
    x = b.input("x", (1, c, kh + draw(dims(0, 3)), kw + draw(dims(0, 3))))
    return _graph(b, b.conv2d(x, k, groups=c), "const_pool")


@case("const_iconv")
@st.composite
def const_iconv_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    g, per = draw(dims(1, 3)), draw(dims(1, 3))
    kh, kw = draw(st.sampled_from((1, 3))), draw(st.sampled_from((1, 3)))
    k = b.const_iconv(channels=g * per, kh=kh, kw=kw, groups=g)
    if draw(st.booleans()):
        return _graph(b, k, "const_iconv")
    x = b.input("x", (1, g * per, draw(dims()), draw(dims())))
    return _graph(b, b.conv2d(x, k, padding="same", groups=g), "const_iconv")


@case("const_imm")
@st.composite
def const_imm_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    n = draw(dims())
    eye = b.const_imm(n=n)
    if draw(st.booleans()):
        return _graph(b, eye, "const_imm")
    return _graph(b, b.matmul(b.input("x", (draw(dims()), n)), eye), "const_imm")


@case("const_one")
@st.composite
def const_one_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    one = b.const_one(shape=shape)
    if draw(st.booleans()):
        return _graph(b, one, "const_one")
    return _graph(b, b.ewmul(b.input("x", shape), one), "const_one")


# ---- linear ops -------------------------------------------------------------------------

@case("matmul")
@st.composite
def matmul_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    m, k, n = draw(dims()), draw(dims()), draw(dims())
    batch_a, batch_b = draw(broadcast_pair(max_rank=2))
    x = draw(tensor_source(b, "a", (*batch_a, m, k)))
    w = draw(tensor_source(b, "b", (*batch_b, k, n)))
    act = draw(st.sampled_from(ACTIVATIONS))
    return _graph(b, b.matmul(x, w, activation=act), "matmul")


@case("linear")
@st.composite
def linear_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    k, n = draw(dims()), draw(dims())
    lead = draw(st.lists(dims(), min_size=1, max_size=3))
    x = draw(tensor_source(b, "x", (*lead, k)))
    w = draw(tensor_source(b, "w", (n, k)))
    bias = draw(tensor_source(b, "b", (n,)))
    act = draw(st.sampled_from(ACTIVATIONS))
    return _graph(b, b.linear(x, w, bias, activation=act), "linear")


@case("conv2d")
@st.composite
def conv2d_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    groups = draw(dims(1, 3))
    cin, cout = groups * draw(dims(1, 3)), groups * draw(dims(1, 3))
    kernel, stride, dilation = draw(pairs(1, 3)), draw(pairs(1, 2)), draw(pairs(1, 2))
    size = (draw(dims(1, 8)), draw(dims(1, 8)))
    padding = draw(padding_for(size, kernel, dilation, max_pad=(2, 2)))
    x = draw(tensor_source(b, "x", (draw(dims(1, 2)), cin, *size)))
    w = draw(tensor_source(b, "w", (cout, cin // groups, *kernel)))
    y = b.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups,
                 activation=draw(st.sampled_from(ACTIVATIONS)))
    return _graph(b, y, "conv2d")


@case("ewadd", "ewmul")
@st.composite
def elementwise_binary_case(draw: DrawFn, op: str) -> Graph:
    b = GraphBuilder()
    sa, sb = draw(broadcast_pair())
    x = draw(tensor_source(b, "a", sa))
    y = x if draw(st.integers(0, 5)) == 0 and sa == sb else draw(tensor_source(b, "b", sb))
    return _graph(b, b.op(op, x, y), op)


@case("smul")
@st.composite
def smul_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    x = draw(tensor_source(b, "x", draw(shapes(0, 4))))
    kind = draw(st.sampled_from(("constant", "input", "weight")))
    if kind == "constant":  # e.g. an attention scale 1/sqrt(d) stored as a weight
        value = draw(st.floats(-4.0, 4.0, allow_nan=False, allow_infinity=False))
        s = b.weight("s", (), data=np.array(value, dtype=np.float32))
    elif kind == "input":
        s = b.input("s", ())
    else:
        s = b.weight("s", (), init=draw(st.sampled_from(("normal", "positive", "ones"))))
    return _graph(b, b.smul(x, s), "smul")


# ---- element-wise activations ---------------------------------------------------------

@case("relu", "sigmoid", "tanh")
@st.composite
def unary_case(draw: DrawFn, op: str) -> Graph:
    b = GraphBuilder()
    x = draw(tensor_source(b, "x", draw(shapes(0, 4)), init="normal"))
    return _graph(b, b.op(op, x), op)


@case("gelu")
@st.composite
def gelu_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    x = draw(tensor_source(b, "x", draw(shapes(0, 4)), init="normal"))
    return _graph(b, b.gelu(x, approximate=draw(st.sampled_from(("none", "tanh")))), "gelu")


# ---- movement ---------------------------------------------------------------------------

@case("transpose")
@st.composite
def transpose_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 5))
    x = draw(tensor_source(b, "x", shape))
    perm: tuple[int, ...] = ()
    if draw(st.integers(0, 4)):  # () means reversed, as in numpy and ONNX
        perm = tuple(draw(st.permutations(range(len(shape)))))
    return _graph(b, b.transpose(x, perm=perm), "transpose")


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1 and p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


@case("reshape")
@st.composite
def reshape_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    x = draw(tensor_source(b, "x", shape))
    rank = draw(st.integers(0 if math.prod(shape) == 1 else 1, 4))
    target = [1] * rank
    for p in _prime_factors(math.prod(shape)):  # deal the size's prime factors to dims
        target[draw(st.integers(0, rank - 1))] *= p
    if rank and draw(st.booleans()):
        target[draw(st.integers(0, rank - 1))] = -1
    return _graph(b, b.reshape(x, shape=tuple(target)), "reshape")


@case("concat")
@st.composite
def concat_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(1, 4))
    axis = draw(axis_of(len(shape)))
    parts = []
    for i in range(draw(st.integers(1, 4))):
        s = list(shape)
        s[axis] = draw(dims(1, 4))
        parts.append(draw(tensor_source(b, f"x{i}", tuple(s))))
    if len(parts) > 1 and draw(st.integers(0, 4)) == 0:
        parts.append(parts[0])  # the same value twice, as in x ++ x
    return _graph(b, b.concat(*parts, axis=axis), "concat")


@case("split")
@st.composite
def split_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(1, 4))
    axis = draw(axis_of(len(shape)))
    d = shape[axis]
    cuts = sorted(draw(st.lists(st.integers(0, d), min_size=0, max_size=3)))
    bounds = [0, *cuts, d]
    sizes = tuple(hi - lo for lo, hi in itertools.pairwise(bounds))
    x = draw(tensor_source(b, "x", shape))
    outs = b.split(x, axis=axis, sizes=sizes)
    assert isinstance(outs, tuple)
    # All outputs, or a subset (a graph that ignores some pieces).
    keep = draw(st.lists(st.sampled_from(outs), min_size=1, unique=True)) \
        if draw(st.integers(0, 3)) == 0 else list(outs)
    return _graph(b, keep, "split")


@case("slice")
@st.composite
def slice_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(1, 4))
    x = draw(tensor_source(b, "x", shape))
    starts, ends, steps = [], [], []
    for d in shape:
        starts.append(draw(st.integers(-d - 1, d + 1)))
        # Large ends as ONNX writes "to the end" (INT64_MAX) must clamp.
        ends.append(draw(st.one_of(st.integers(-d - 1, d + 1), st.just(2**62))))
        steps.append(draw(st.integers(1, 3)))
    if draw(st.integers(0, 3)) == 0:
        steps = []  # default: step 1 everywhere
    y = b.slice(x, starts=tuple(starts), ends=tuple(ends), steps=tuple(steps))
    return _graph(b, y, "slice")


@case("pad")
@st.composite
def pad_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    x = draw(tensor_source(b, "x", shape))
    pads = tuple(draw(st.lists(st.integers(0, 2), min_size=2 * len(shape),
                               max_size=2 * len(shape))))
    return _graph(b, b.pad(x, pads=pads), "pad")


@case("enlarge")
@st.composite
def enlarge_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    h, w = draw(dims(1, 3)), draw(dims(1, 3))
    k = draw(tensor_source(b, "w", (draw(dims(1, 4)), draw(dims(1, 4)), h, w)))
    y = b.enlarge(k, kh=h + 2 * draw(st.integers(0, 2)), kw=w + 2 * draw(st.integers(0, 2)))
    return _graph(b, y, "enlarge")


@case("copy")
@st.composite
def copy_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    x = draw(tensor_source(b, "x", shape))
    if len(shape) >= 2 and draw(st.booleans()):  # copy of a strided (transposed) value
        x = b.transpose(x, perm=tuple(draw(st.permutations(range(len(shape))))))
    return _graph(b, b.copy(x), "copy")


@case("layout")
@st.composite
def layout_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    x = draw(tensor_source(b, "x", shape))
    m2m = tuple(draw(st.permutations(range(len(shape)))))
    return _graph(b, b.layout(x, minor_to_major=m2m), "layout")


# ---- pooling ----------------------------------------------------------------------------

@case("pool2d_avg", "pool2d_max")
@st.composite
def pool_case(draw: DrawFn, op: str) -> Graph:
    b = GraphBuilder()
    kernel, stride = draw(pairs(1, 3)), draw(pairs(1, 2))
    size = (draw(dims(1, 8)), draw(dims(1, 8)))
    # Pads below the kernel size (as ONNX requires) keep a real cell in every window.
    padding = draw(padding_for(size, kernel, (1, 1),
                               max_pad=(kernel[0] - 1, kernel[1] - 1)))
    x = draw(tensor_source(b, "x", (draw(dims(1, 2)), draw(dims(1, 4)), *size)))
    attrs: dict[str, object] = {"kernel": kernel, "stride": stride, "padding": padding,
                                "activation": draw(st.sampled_from(ACTIVATIONS))}
    if op == "pool2d_avg":
        attrs["count_include_pad"] = draw(st.booleans())
    return _graph(b, b.op(op, x, **attrs), op)


# ---- reductions and normalisations ------------------------------------------------------

@case("reduce_sum", "reduce_mean")
@st.composite
def reduce_case(draw: DrawFn, op: str) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    x = draw(tensor_source(b, "x", shape))
    axes: tuple[int, ...] = ()
    if shape and draw(st.integers(0, 4)):
        picked = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
        axes = tuple(a - len(shape) if draw(st.booleans()) else a for a in picked)
    return _graph(b, b.op(op, x, axes=axes, keepdims=draw(st.booleans())), op)


@case("softmax")
@st.composite
def softmax_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(1, 4))
    x = draw(tensor_source(b, "x", shape, init="normal"))
    return _graph(b, b.softmax(x, axis=draw(axis_of(len(shape)))), "softmax")


@case("layer_norm")
@st.composite
def layer_norm_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(1, 4, lo=2))
    axis = draw(axis_of(len(shape)))
    norm = shape[axis:]
    x = draw(tensor_source(b, "x", shape, init="normal"))
    gamma = draw(tensor_source(b, "gamma", norm, init=draw(st.sampled_from(("ones", "normal")))))
    beta = draw(tensor_source(b, "beta", norm, init=draw(st.sampled_from(("zeros", "normal")))))
    eps = draw(st.sampled_from((1e-5, 1e-6, 1e-3)))
    return _graph(b, b.layer_norm(x, gamma, beta, axis=axis, eps=eps), "layer_norm")


@case("batch_norm")
@st.composite
def batch_norm_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(2, 4))
    c = (shape[1],)
    x = draw(tensor_source(b, "x", shape, init="normal"))
    scale = b.weight("scale", c, init=draw(st.sampled_from(("ones", "normal"))))
    bias = b.weight("bias", c, init=draw(st.sampled_from(("zeros", "normal"))))
    mean = b.weight("mean", c, init="normal")
    var = b.weight("var", c, init="positive")
    eps = draw(st.sampled_from((1e-5, 1e-3)))
    return _graph(b, b.batch_norm(x, scale, bias, mean, var, eps=eps), "batch_norm")


@case("lrn")
@st.composite
def lrn_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    x = draw(tensor_source(b, "x", (draw(dims(1, 2)), draw(dims(1, 6)), draw(dims(1, 4)),
                                    draw(dims(1, 4))), init="normal"))
    y = b.lrn(x, size=draw(dims(1, 5)),  # even sizes: the window is off-centre (ONNX)
              alpha=draw(st.sampled_from((1e-4, 1e-2, 0.5))),
              beta=draw(st.sampled_from((0.75, 0.5, 1.0))),
              bias=draw(st.sampled_from((1.0, 2.0))))
    return _graph(b, y, "lrn")


@case("embedding")
@st.composite
def embedding_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    vocab, width = draw(dims(1, 10)), draw(dims())
    ids = b.input("ids", draw(shapes(0, 3)), "i64", high=vocab)
    table = draw(tensor_source(b, "table", (vocab, width), init="normal"))
    return _graph(b, b.embedding(ids, table), "embedding")



# ---- transformer-era element-wise ops ---------------------------------------------------

@case("neg", "exp", "erf", "silu", "sin", "cos")
@st.composite
def math_unary_case(draw: DrawFn, op: str) -> Graph:
    b = GraphBuilder()
    x = draw(tensor_source(b, "x", draw(shapes(0, 4)), init="normal"))
    return _graph(b, b.op(op, x), op)


@st.composite
def positive_source(draw: DrawFn, b: GraphBuilder, name: str, shape: tuple[int, ...]) -> Value:
    """An operand away from zero and positive (the domain of log, roots and reciprocals)."""
    if draw(st.booleans()):
        return b.weight(name, shape, init="positive")
    data = np.abs(draw(weight_data(shape))) + np.float32(0.25)
    return b.weight(name, shape, data=data)


@case("acos")
@st.composite
def acos_case(draw: DrawFn) -> Graph:
    """An operand inside [-1, 1], the domain of acos (clipped: its ends occur)."""
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    data = np.clip(draw(weight_data(shape)), -1.0, 1.0).astype(np.float32)
    return _graph(b, b.op("acos", b.weight("x", shape, data=data)), "acos")


@case("log", "sqrt", "rsqrt", "recip")
@st.composite
def positive_unary_case(draw: DrawFn, op: str) -> Graph:
    b = GraphBuilder()
    x = draw(positive_source(b, "x", draw(shapes(0, 4))))
    return _graph(b, b.op(op, x), op)


@case("pow")
@st.composite
def pow_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 4))
    exponent = draw(st.sampled_from((2.0, 3.0, 0.5, -1.0, -0.5, 1.5, 0.0)))
    if float(exponent).is_integer() and exponent >= 0:
        x = draw(tensor_source(b, "x", shape, init="normal"))
    else:
        x = draw(positive_source(b, "x", shape))
    return _graph(b, b.pow(x, exponent=exponent), "pow")


@case("sub", "maximum", "minimum", "eq", "lt", "gt")
@st.composite
def math_binary_case(draw: DrawFn, op: str) -> Graph:
    b = GraphBuilder()
    sa, sb = draw(broadcast_pair())
    x = draw(tensor_source(b, "a", sa, init="normal"))
    y = x if draw(st.integers(0, 5)) == 0 and sa == sb else draw(
        tensor_source(b, "b", sb, init="normal"))
    return _graph(b, b.op(op, x, y), op)


@case("div")
@st.composite
def div_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    sa, sb = draw(broadcast_pair())
    x = draw(tensor_source(b, "a", sa, init="normal"))
    y = draw(positive_source(b, "b", sb))
    return _graph(b, b.div(x, y), "div")


@case("where")
@st.composite
def where_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    sa, sb = draw(broadcast_pair(3))
    if draw(st.booleans()):
        c = b.input("c", sa, "bool", high=2)
    else:  # a comparison feeding the select, as masks are made
        c = b.gt(b.input("p", sa), b.input("q", sa))
    x = draw(tensor_source(b, "a", sa, init="normal"))
    y = draw(tensor_source(b, "b", sb, init="normal"))
    return _graph(b, b.where(c, x, y), "where")


@case("cast")
@st.composite
def cast_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(0, 3))
    src = draw(st.sampled_from(("f32", "i64", "bool")))
    if src == "f32":
        x = draw(tensor_source(b, "x", shape, init="normal"))
    else:
        x = b.input("x", shape, src, high=2 if src == "bool" else 20)
    to = draw(st.sampled_from(("f32", "f16", "bf16", "i32", "i64", "bool")))
    return _graph(b, b.cast(x, to=to), "cast")


# ---- gathers, broadcasts and index constants ---------------------------------------------

@case("gather")
@st.composite
def gather_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(1, 3))
    axis = draw(axis_of(len(shape)))
    x = draw(tensor_source(b, "x", shape, init="normal"))
    ids = b.input("ids", draw(shapes(0, 2)), "i64", high=shape[axis])
    return _graph(b, b.gather(x, ids, axis=axis), "gather")


@case("expand")
@st.composite
def expand_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    full = draw(shapes(1, 4))
    keep = draw(st.integers(0, len(full)))
    small = tuple(d if draw(st.booleans()) else 1 for d in full[len(full) - keep:])
    x = draw(tensor_source(b, "x", small, init="normal"))
    return _graph(b, b.expand(x, shape=full), "expand")


@case("iota")
@st.composite
def iota_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(1, 3))
    dtype = draw(st.sampled_from(("i64", "i32", "f32")))
    y = b.iota(shape=shape, axis=draw(axis_of(len(shape))), dtype=dtype)
    if dtype == "f32" and draw(st.booleans()):  # positions scaled, as rotary tables are
        y = b.ewmul(y, b.input("f", shape))
    return _graph(b, y, "iota")


@case("tri_mask")
@st.composite
def tri_mask_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    rows, cols = draw(dims()), draw(dims())
    m = b.tri_mask(rows=rows, cols=cols, diagonal=draw(st.integers(-2, 2)),
                   lower=draw(st.booleans()))
    if draw(st.booleans()):  # the causal mask applied to scores
        m = b.where(m, b.input("s", (rows, cols)), b.input("fill", (rows, cols)))
    return _graph(b, m, "tri_mask")


# ---- transformer-era reductions, norms and attention ------------------------------------

@case("reduce_max")
@st.composite
def reduce_max_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(1, 4))
    x = draw(tensor_source(b, "x", shape, init="normal"))
    picked = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    y = b.reduce_max(x, axes=tuple(picked), keepdims=draw(st.booleans()))
    return _graph(b, y, "reduce_max")


@st.composite
def tied_operand(draw: DrawFn, b: GraphBuilder) -> tuple[Value, int]:
    """A float operand, or integer ids in [0, 3) where ties are common (the first extreme
    index must win, equal values keep their index order), and an axis of it."""
    shape = draw(shapes(1, 4))
    if draw(st.booleans()):
        x = draw(tensor_source(b, "x", shape, init="normal"))
    else:
        x = b.input("x", shape, "i64", high=3)
    return x, draw(st.integers(-len(shape), len(shape) - 1))


@case("argmax")
@st.composite
def argmax_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    x, axis = draw(tied_operand(b))
    return _graph(b, b.argmax(x, axes=(axis,), keepdims=draw(st.booleans())), "argmax")


@case("topk")
@st.composite
def topk_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    x, axis = draw(tied_operand(b))
    k = draw(st.integers(1, b.shape(x)[axis]))
    vals, idx = b.topk(x, k=k, axis=axis, largest=draw(st.booleans()))
    return _graph(b, [vals, idx], "topk")


@case("rms_norm")
@st.composite
def rms_norm_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    shape = draw(shapes(1, 4, lo=2))
    axis = draw(axis_of(len(shape)))
    x = draw(tensor_source(b, "x", shape, init="normal"))
    w = draw(tensor_source(b, "w", shape[axis:], init=draw(st.sampled_from(("ones", "normal")))))
    eps = draw(st.sampled_from((1e-6, 1e-5)))
    return _graph(b, b.rms_norm(x, w, axis=axis, eps=eps), "rms_norm")


@case("attention")
@st.composite
def attention_case(draw: DrawFn) -> Graph:
    b = GraphBuilder()
    batch = draw(shapes(0, 1, hi=2))
    kv_heads, group = draw(dims(1, 2)), draw(dims(1, 2))
    lq, lk, d, dv = draw(dims(1, 5)), draw(dims(1, 5)), draw(dims(1, 4)), draw(dims(1, 4))
    causal = draw(st.booleans())
    q = draw(tensor_source(b, "q", (*batch, kv_heads * group, lq, d), init="normal"))
    k = draw(tensor_source(b, "k", (*batch, kv_heads, lk, d), init="normal"))
    v = draw(tensor_source(b, "v", (*batch, kv_heads, lk, dv), init="normal"))
    scale = draw(st.sampled_from((0.0, 0.125, 1.0)))
    return _graph(b, b.attention(q, k, v, scale=scale, causal=causal), "attention")

def without_activations(graph: Graph) -> Graph:
    """The graph with every fused activation removed: op cases draw activations, and the
    box theorem covers the multi-linear op underneath."""

    def rule(b, node, inputs, lookup):  # type: ignore[no-untyped-def]
        attrs = node.a
        if attrs.get("activation", "none") == "none":
            return None
        attrs["activation"] = "none"
        return b.add(node.op, inputs, attrs)

    return transform(graph, rule).graph
