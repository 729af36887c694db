"""Element-wise non-linear activations."""

from __future__ import annotations

import math

import numpy as np

from superopt.ir.opdef import (
    ELEMENTWISE,
    NONLINEAR,
    TRANSCENDENTAL,
    Attrs,
    AttrSpec,
    OpDef,
    register_op,
)
from superopt.ir.ops._common import expect_float, logistic
from superopt.ir.types import TensorType


def _unary_shape(op: str):
    def rule(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
        expect_float(op, 0, ts[0])
        return (ts[0],)
    return rule


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_ref(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


_TRAITS = frozenset({ELEMENTWISE, NONLINEAR})
_TR = frozenset({ELEMENTWISE, NONLINEAR, TRANSCENDENTAL})

RELU = register_op(OpDef(
    name="relu", num_inputs=1, shape=_unary_shape("relu"),
    reference=lambda xs, a: (np.maximum(xs[0], 0.0),), traits=_TRAITS))

SIGMOID = register_op(OpDef(
    name="sigmoid", num_inputs=1, shape=_unary_shape("sigmoid"),
    reference=lambda xs, a: (logistic(xs[0]),), traits=_TR))

TANH = register_op(OpDef(
    name="tanh", num_inputs=1, shape=_unary_shape("tanh"),
    reference=lambda xs, a: (np.tanh(xs[0]),), traits=_TR))

GELU = register_op(OpDef(
    name="gelu", num_inputs=1, shape=_unary_shape("gelu"),
    reference=lambda xs, a: (gelu_ref(xs[0], a["approximate"]),),
    attrs=(AttrSpec("approximate", "str", "none", choices=("none", "tanh")),),
    traits=_TR, doc="Gaussian error linear unit (exact erf form or tanh approximation)."))
