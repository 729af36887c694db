"""Element-wise arithmetic beyond TASO's set: subtraction, division, negation, the
transcendentals transformer models use (exp, log, roots, erf, silu, sin, cos, powers),
element-wise maximum/minimum, comparisons producing booleans, select, and casts.

Primitive vs composite: each of these is one vector-unit instruction (or one EUP
transcendental) on a TPU and one ONNX/ATen op, and rewrite rules need to see them whole
(`exp(a+b) = exp(a)*exp(b)`, `div(x, y) = ewmul(x, recip(y))`), so all are primitive.
`silu` and `rsqrt` could be written with `sigmoid`/`sqrt` and `recip`, but both are single
ops in every framework we import and one fused kernel in every compiler, so an importer
would only have to fold them back.
"""

from __future__ import annotations

import math

import numpy as np

from superopt.ir.errors import ShapeError
from superopt.ir.opdef import (
    ELEMENTWISE,
    LINEAR,
    NONLINEAR,
    TRANSCENDENTAL,
    Attrs,
    AttrSpec,
    OpDef,
    register_op,
)
from superopt.ir.ops._common import broadcast, expect_float, expect_same_dtype
from superopt.ir.types import DType, TensorType

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _float_unary(op: str):
    def rule(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
        expect_float(op, 0, ts[0])
        return (ts[0],)
    return rule


def _unary(name: str, fn, traits: frozenset[str], doc: str, attrs: tuple[AttrSpec, ...] = (),
           linear_in: tuple[int, ...] = ()) -> OpDef:
    return register_op(OpDef(
        name=name, num_inputs=1, shape=_float_unary(name),
        reference=lambda xs, a: (fn(np.asarray(xs[0], dtype=np.float64), a),),
        attrs=attrs, traits=traits, linear_in=linear_in, doc=doc))


_NL = frozenset({ELEMENTWISE, NONLINEAR})
_TR = frozenset({ELEMENTWISE, NONLINEAR, TRANSCENDENTAL})


def _positive_only(fn):
    # Values outside the domain (log of a negative, root of a negative) are NaN in numpy
    # as in torch; the interpreter keeps them so a values check catches a bad rewrite.
    def wrapped(x: np.ndarray, a: Attrs) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return fn(x)
    return wrapped


def silu_ref(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # e^-x = inf below -709: the limit, x / inf = -0
        return x / (1.0 + np.exp(-x))


def pow_ref(x: np.ndarray, exponent: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        if float(exponent).is_integer():
            return np.power(x, int(exponent)) if exponent >= 0 else 1.0 / np.power(x, -int(exponent))
        return np.power(x, exponent)


NEG = _unary("neg", lambda x, a: -x, frozenset({ELEMENTWISE, LINEAR}), "Negation -x.")
EXP = _unary("exp", lambda x, a: np.exp(x), _TR, "Natural exponential e^x.")
LOG = _unary("log", _positive_only(np.log), _TR, "Natural logarithm (NaN below 0, -inf at 0).")
SQRT = _unary("sqrt", _positive_only(np.sqrt), _TR, "Square root (NaN below 0).")
RSQRT = _unary("rsqrt", _positive_only(lambda x: 1.0 / np.sqrt(x)), _TR,
               "Reciprocal square root 1/sqrt(x) (torch.rsqrt; RMSNorm's normaliser).")
RECIP = _unary("recip", _positive_only(lambda x: 1.0 / x), _TR,
               "Reciprocal 1/x (ONNX Reciprocal; inf at 0).")
ERF = _unary("erf", lambda x, a: _erf(x), _TR, "Gauss error function (exact GELU's kernel).")
SILU = _unary("silu", lambda x, a: silu_ref(x), _TR,
              "x * sigmoid(x) (SiLU / swish; SwiGLU's gate and EfficientNet's activation).")
SIN = _unary("sin", lambda x, a: np.sin(x), _TR, "Sine (rotary position embeddings).")
COS = _unary("cos", lambda x, a: np.cos(x), _TR, "Cosine (rotary position embeddings).")
ACOS = _unary("acos", _positive_only(np.arccos), _TR,
              "Arc cosine in [0, pi] (NaN outside [-1, 1]; YOSO's collision probability "
              "1 - acos(cos similarity) / pi).")
POW = _unary("pow", lambda x, a: pow_ref(x, a["exponent"]), _TR,
             "x ** exponent for a constant exponent (ONNX Pow with a constant; x**2 in norms).",
             attrs=(AttrSpec("exponent", "float", doc="the constant exponent"),))


# ---- binary arithmetic ---------------------------------------------------------------

def _binary_shape(op: str):
    def rule(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
        dtype = expect_same_dtype(op, ts)
        return (TensorType(broadcast(op, ts[0].shape, ts[1].shape), dtype),)
    return rule


def _div_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.true_divide(xs[0], xs[1]),)


SUB = register_op(OpDef(
    name="sub", num_inputs=2, shape=_binary_shape("sub"),
    reference=lambda xs, a: (xs[0] - xs[1],),
    traits=frozenset({ELEMENTWISE, LINEAR}), input_names=("a", "b"),
    doc="Element-wise difference a - b (numpy broadcasting)."))

DIV = register_op(OpDef(
    name="div", num_inputs=2, shape=_binary_shape("div"), reference=_div_ref,
    traits=_TR, linear_in=(0,), input_names=("a", "b"),
    doc="Element-wise quotient a / b (numpy broadcasting); linear in a only."))

MAXIMUM = register_op(OpDef(
    name="maximum", num_inputs=2, shape=_binary_shape("maximum"),
    reference=lambda xs, a: (np.maximum(xs[0], xs[1]),),
    traits=_NL, input_names=("a", "b"), doc="Element-wise maximum (torch.maximum, ONNX Max)."))

MINIMUM = register_op(OpDef(
    name="minimum", num_inputs=2, shape=_binary_shape("minimum"),
    reference=lambda xs, a: (np.minimum(xs[0], xs[1]),),
    traits=_NL, input_names=("a", "b"), doc="Element-wise minimum (torch.minimum, ONNX Min)."))


# ---- comparisons and select -----------------------------------------------------------

def _compare_shape(op: str):
    def rule(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
        expect_same_dtype(op, ts)
        return (TensorType(broadcast(op, ts[0].shape, ts[1].shape), DType.BOOL),)
    return rule


def _compare(name: str, fn, doc: str) -> OpDef:
    return register_op(OpDef(
        name=name, num_inputs=2, shape=_compare_shape(name),
        reference=lambda xs, a: (fn(xs[0], xs[1]).astype(np.int64),),
        traits=_NL, input_names=("a", "b"), doc=doc))


EQ = _compare("eq", np.equal, "Element-wise a == b, a boolean tensor.")
LT = _compare("lt", np.less, "Element-wise a < b, a boolean tensor.")
GT = _compare("gt", np.greater, "Element-wise a > b, a boolean tensor.")


def _where_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    c, a, b = ts
    if c.dtype != DType.BOOL:
        raise ShapeError("where", 0, "a bool tensor (the condition)", str(c))
    dtype = expect_same_dtype("where", (a, b))
    shape = broadcast("where", broadcast("where", c.shape, a.shape, 1), b.shape, 2)
    return (TensorType(shape, dtype),)


WHERE = register_op(OpDef(
    name="where", num_inputs=3, shape=_where_shape,
    reference=lambda xs, a: (np.where(np.asarray(xs[0]) != 0, xs[1], xs[2]),),
    traits=_NL, linear_in=(), input_names=("cond", "a", "b"),
    doc="Select a where cond else b (numpy broadcasting of all three); causal masks."))


# ---- cast ---------------------------------------------------------------------------

CAST_DTYPES = ("f32", "f16", "bf16", "i32", "i64", "bool")


def _cast_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    return (TensorType(ts[0].shape, DType.parse(attrs["to"])),)


def cast_ref(x: np.ndarray, to: str) -> np.ndarray:
    """Float dtypes all run as float64 in the reference semantics, so a cast between them
    is the identity here (the rounding is a real backend's); a cast to an integer type
    truncates toward zero as torch and ONNX do; to bool it tests for non-zero."""
    dt = DType.parse(to)
    if dt.is_float:
        return np.asarray(x, dtype=np.float64)
    if dt == DType.BOOL:
        return (np.asarray(x) != 0).astype(np.int64)
    return np.trunc(np.asarray(x, dtype=np.float64)).astype(np.int64)


CAST = register_op(OpDef(
    name="cast", num_inputs=1, shape=_cast_shape,
    reference=lambda xs, a: (cast_ref(xs[0], a["to"]),),
    attrs=(AttrSpec("to", "str", choices=CAST_DTYPES, doc="the target dtype"),),
    traits=_NL, doc="Convert element type (torch .to(dtype), ONNX Cast)."))
