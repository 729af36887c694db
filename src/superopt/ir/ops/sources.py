"""Graph sources: runtime inputs and weights (constant parameters, possibly with data)."""

from __future__ import annotations

import numpy as np

from superopt.ir.opdef import CONSTANT, SOURCE, Attrs, AttrSpec, OpDef, register_op
from superopt.ir.types import DType, TensorType


def _dtype_check(v: str) -> str | None:
    try:
        DType.parse(v)
    except ValueError as e:
        return str(e)
    return None


def _shape_check(v: tuple[int, ...]) -> str | None:
    if any(d < 0 for d in v):
        return f"dimensions must be >= 0, found {v!r}"
    return None


def _source_shape(_: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    return (TensorType(tuple(attrs["shape"]), DType.parse(attrs["dtype"])),)


def _no_reference(_: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    # The interpreter feeds sources itself (from feeds or the graph's weight store).
    raise RuntimeError(f"source {attrs['name']!r} has no value; the interpreter supplies it")


_SOURCE_ATTRS = (
    AttrSpec("name", "str", doc="unique name; feeds and weight data are keyed by it"),
    AttrSpec("shape", "ints", check=_shape_check),
    AttrSpec("dtype", "str", "f32", check=_dtype_check),
    AttrSpec("init", "str", "fan_in", choices=("fan_in", "normal", "ones", "zeros", "positive"),
             doc="how interpreters draw a value when no data is given (positive: variances)"),
    AttrSpec("high", "int", 0, doc="integer sources: values are drawn from [0, high)"),
)

INPUT = register_op(OpDef(
    name="input", num_inputs=0, shape=_source_shape, reference=_no_reference,
    attrs=_SOURCE_ATTRS, traits=frozenset({SOURCE}),
    doc="A runtime input of the graph.",
))

WEIGHT = register_op(OpDef(
    name="weight", num_inputs=0, shape=_source_shape, reference=_no_reference,
    attrs=_SOURCE_ATTRS, traits=frozenset({SOURCE, CONSTANT}),
    doc="A parameter known at compile time; its data, if any, lives in Graph.weights.",
))
